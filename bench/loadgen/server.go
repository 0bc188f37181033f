package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
)

// server is a TaskFlow instance the harness sends requests to.
type server struct {
	url   string
	pid   int       // of the subprocess; 0 in process
	db    *store.DB // in process: the server's store
	close func()
}

// startInproc serves the real handler on a loopback listener in this process,
// on a pool of its own whose connections are named app (traced by rec when
// rec is not nil). guards turns the rate limiter and idempotency on.
func startInproc(ctx context.Context, cfg Config, poolCfg *pgxpool.Config, rec *Recorder, guards bool, log *slog.Logger, app string) (*server, error) {
	var tracer pgx.QueryTracer
	if rec != nil {
		tracer = rec
	}
	pool, err := newPool(ctx, poolCfg, app, tracer)
	if err != nil {
		return nil, err
	}
	db := store.New(pool, log)
	h, closeHandler, err := newHandler(cfg, db, log, guards)
	if err != nil {
		pool.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &server{url: "http://" + ln.Addr().String(), db: db, close: func() {
		_ = srv.Close()
		closeHandler()
		pool.Close()
	}}, nil
}

// newPool opens a pool of poolCfg whose connections have application_name
// app (by which the CPU meter finds their backends) and tracer, if not nil.
func newPool(ctx context.Context, poolCfg *pgxpool.Config, app string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	pc := poolCfg.Copy()
	pc.ConnConfig.RuntimeParams["application_name"] = app
	if tracer != nil {
		pc.ConnConfig.Tracer = tracer
	}
	return pgxpool.NewWithConfig(ctx, pc)
}

// withApplicationName returns the connection string dsn (a URL or key=value
// pairs) with application_name set to app.
func withApplicationName(dsn, app string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " application_name=" + app
}

// startExec builds the server binary into a temporary directory and starts it
// on a free loopback port with the run's database and Redis, and waits until
// /healthz answers 200.
func startExec(ctx context.Context, cfg Config) (*server, error) {
	dir, err := os.MkdirTemp("", "taskflow-bench-")
	if err != nil {
		return nil, err
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "taskflow")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		// Port 0: the server picks a free port and logs it ("listening"), so no
		// other process can take it between a check and the listen.
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_LEVEL=info", // the "listening" line, and access lines as in production
		"DATABASE_URL="+withApplicationName(cfg.DatabaseURL, appTaskFlow),
		"REDIS_URL="+cfg.RedisURL,
		// The limiter runs on every request but never refuses one: the harness
		// measures its cost, not its budget.
		"RATE_LIMIT_POINTS=1000000000",
	)
	cmd.Env = append(cmd.Env, cfg.ServerEnv...)
	// The server logs as in production (JSON access lines at info), into a file
	// shown only when it fails to start.
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the harness, if the harness dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{pid: cmd.Process.Pid, close: func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.url == "" {
			if addr := listeningAddr(logFile.Name()); addr != "" {
				s.url = "http://" + addr
			}
		}
		if s.url != "" {
			res, err := http.Get(s.url + "/healthz")
			if err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					return s, nil
				}
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logFile.Name())
			s.close()
			return nil, fmt.Errorf("the server binary did not become healthy in 30s:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Binary is the real server binary running as a subprocess (StartBinary).
type Binary struct{ s *server }

// StartBinary builds the server binary and starts it with cfg's database and
// Redis (and cfg.ServerEnv) on a free loopback port, as Run does with Exec,
// and returns once /healthz answers 200.
func StartBinary(ctx context.Context, cfg Config) (*Binary, error) {
	s, err := startExec(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Binary{s: s}, nil
}

// URL is the server's base URL (http://127.0.0.1:port).
func (b *Binary) URL() string { return b.s.url }

// PID is the server process's id.
func (b *Binary) PID() int { return b.s.pid }

// ProcStatus returns a field of the server's /proc/<pid>/status in bytes
// ("VmRSS:", "VmHWM:"), 0 when it cannot be read.
func (b *Binary) ProcStatus(field string) int64 {
	return statusKB(fmt.Sprintf("/proc/%d/status", b.s.pid), field)
}

// Close stops the server (SIGINT, then SIGKILL after 10 s) and removes the
// binary.
func (b *Binary) Close() { b.s.close() }

// listeningAddr returns the address of the server's "listening" log line in
// the log file at path, or "" before it is written.
func listeningAddr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
			return rec.Addr
		}
	}
	return ""
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the taskflow module")
	}
	return filepath.Dir(mod), nil
}

// rssPeak returns the subprocess's peak resident set (VmHWM) in bytes.
func (s *server) rssPeak() int64 { return statusKB(fmt.Sprintf("/proc/%d/status", s.pid), "VmHWM:") }

// selfRSSPeak returns this process's peak resident set (VmHWM) in bytes.
func selfRSSPeak() int64 { return statusKB("/proc/self/status", "VmHWM:") }

func statusKB(path, field string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
