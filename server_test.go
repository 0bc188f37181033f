package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apitest.RemoveBinary()
	os.Exit(code)
}

// command returns the taskflow command with a clean configuration plus extra.
func command(t *testing.T, extra ...string) *exec.Cmd {
	cmd := exec.Command(apitest.Binary(t))
	cmd.Env = apitest.CleanEnv()
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdin = nil
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return exit.ExitCode()
}

func TestStartupExplainsWhenPostgresIsDown(t *testing.T) {
	t.Parallel()
	cmd := command(t, "DATABASE_URL=postgres://taskflow:hunter2@127.0.0.1:1/taskflow?sslmode=disable", "HTTP_ADDR=127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	code := exitCode(t, cmd.Run())
	out := stderr.String()
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, out)
	}
	for _, want := range []string{
		"cannot reach Postgres",
		"host=127.0.0.1 port=1 user=taskflow database=taskflow",
		"from:  DATABASE_URL",
		"What to do",
		"DATABASE_URL=postgres://",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("stderr shows the password:\n%s", out)
	}
	if strings.Contains(out, `"msg":"listening"`) {
		t.Errorf("listened without a database:\n%s", out)
	}
}

func TestStartupRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	cmd := command(t, "RATE_LIMIT_POINTS=plenty", "IDEMPOTENCY_WAIT=forever", "REQUEST_TIMEOUT=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"bad configuration", `RATE_LIMIT_POINTS="plenty"`, `IDEMPOTENCY_WAIT="forever"`,
		`REQUEST_TIMEOUT="0": not a duration from 100ms to 50s`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// logLines streams the JSON log records of a running server.
type logLines struct {
	ch  chan map[string]any
	mu  sync.Mutex
	raw strings.Builder
}

func watchLog(t *testing.T, r io.Reader) *logLines {
	l := &logLines{ch: make(chan map[string]any, 100)}
	go func() {
		defer close(l.ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.raw.WriteString(sc.Text() + "\n")
			l.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				l.ch <- m
			}
		}
	}()
	return l
}

// waitFor returns the first record with the message msg (or fails when the log ends).
func (l *logLines) waitFor(t *testing.T, msg string) map[string]any {
	t.Helper()
	for m := range l.ch {
		if m["msg"] == msg {
			return m
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("log ended without %q:\n%s", msg, l.raw.String())
	return nil
}

// TestGracefulShutdown sends SIGTERM while a request is in flight (its handler is
// reading the body, which the client has not finished sending): the server stops
// accepting connections, the request still completes, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	cmd := command(t, "DATABASE_URL="+storetest.URL(t), "HTTP_ADDR=127.0.0.1:0", "REDIS_URL=redis://127.0.0.1:6379/0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	logs := watchLog(t, stderr)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	addr, _ := logs.waitFor(t, "listening")["addr"].(string)

	// Health over a normal request first: Postgres and the shared Redis answer.
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	health, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK ||
		string(health) != `{"postgres":{"ok":true},"redis":{"ok":true,"mode":"redis"},"status":"ok"}`+"\n" {
		t.Fatalf("healthz = %d %s", res.StatusCode, health)
	}

	// Start a request and hold its body back. Expect: 100-continue makes the
	// server say when the handler starts reading the body, so the request is
	// provably in flight before the signal.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"query":"query InFlight { __typename }"}`
	fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\nX-Request-ID: in-flight-1\r\n\r\n", addr, len(body))
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, "100 Continue") {
		t.Fatalf("interim response %q, %v", status, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after 100 Continue
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(t, "shutting down: no new connections, finishing requests in flight")
	// The listener closes: wait until a new connection is refused.
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}

	// Now finish the request: it is answered in full.
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(string(got), `{"data":{"__typename":"Query"},"extensions":{"cost":`) ||
		res.Header.Get("X-Request-ID") != "in-flight-1" {
		t.Fatalf("in-flight request = %d %q %v", res.StatusCode, got, res.Header)
	}

	line := logs.waitFor(t, "request")
	if line["request_id"] != "in-flight-1" || line["operation"] != "InFlight" {
		t.Errorf("access log = %v", line)
	}
	logs.waitFor(t, "stopped")
	for range logs.ch { // drain until the process closes stderr
	}
	go func() { done <- cmd.Wait() }()
	if code := exitCode(t, <-done); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// With AUDIT_SIGNING_KEY unset the server generates a key and logs it, with
// a warning, in the form the variable takes; a key that is set is used and
// only its public half is logged.
func TestAuditSigningKeyAtStart(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	key := auditSigningKey(nil, log)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	back, err := audit.ParseSigningKey(fmt.Sprint(rec["AUDIT_SIGNING_KEY"]))
	if rec["level"] != "WARN" || err != nil || !back.Equal(key) ||
		rec["public_key"] != audit.EncodePublicKey(key.Public().(ed25519.PublicKey)) {
		t.Fatalf("log line %s (%v)", buf.Bytes(), err)
	}
	buf.Reset()
	if got := auditSigningKey(key, log); !got.Equal(key) || strings.Contains(buf.String(), audit.EncodeSigningKey(key)) ||
		!strings.Contains(buf.String(), audit.KeyID(key.Public().(ed25519.PublicKey))) {
		t.Fatalf("configured key: %s", buf.Bytes())
	}
}

// A BLOB_SWEEP_GRACE shorter than an upload may take is warned of at start;
// the default is not.
func TestShortSweepGraceIsWarned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		grace time.Duration
		warn  bool
	}{{2 * time.Second, true}, {httpapi.TransferTimeout - time.Second, true}, {blobs.DefaultSweepGrace, false}, {httpapi.TransferTimeout, false}} {
		var buf bytes.Buffer
		warnShortSweepGrace(c.grace, slog.New(slog.NewJSONHandler(&buf, nil)))
		if got := strings.Contains(buf.String(), `"level":"WARN"`) && strings.Contains(buf.String(), "BLOB_SWEEP_GRACE"); got != c.warn {
			t.Errorf("grace %s: warned %v, want %v: %s", c.grace, got, c.warn, buf.String())
		}
	}
}

// TestStartupRefusesADatabaseFromAnotherCluster: a database whose spine
// cursor carries a transaction id this cluster has not assigned (restored
// from another cluster's pg_dump) is refused at start, with the ids and what
// to do, before anything listens or writes.
func TestStartupRefusesADatabaseFromAnotherCluster(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(t.Context(), `UPDATE audit_seal_cursor SET tx_id = '1099511627776' WHERE id = 1`)
	conn.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(t, "DATABASE_URL="+url, "HTTP_ADDR=127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A server that starts anyway is stopped, and the test fails.
	stop := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer stop.Stop()
	code := exitCode(t, cmd.Wait())
	out := stderr.String()
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, out)
	}
	for _, want := range []string{"highest id 1099511627776", "logical dump", "What to do", "pg_resetwal", "Backups and restores"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"msg":"listening"`) {
		t.Errorf("listened over a database from another cluster:\n%s", out)
	}
}
