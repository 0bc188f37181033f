// Package scaleout_test runs the real taskflow binary as several processes on one
// Postgres and one Redis, and through faults: killed processes, a cut Redis, an
// unreachable Postgres, many idle connections and bad input.
package scaleout_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/auth"
	"taskflow/httpapi/apitest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apitest.RemoveBinary()
	os.Exit(code)
}

// freeAddr returns a loopback address with a port nobody listens on right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// instance is one taskflow process; it keeps its address across restarts,
// unless another process took the port while it was down (see waitReady).
type instance struct {
	t      testing.TB
	addr   string
	url    string
	env    []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
}

// newInstance prepares a process of the binary with the given settings (without
// starting it); it is killed when the test ends.
func newInstance(t testing.TB, env ...string) *instance {
	t.Helper()
	addr := freeAddr(t)
	in := &instance{t: t, addr: addr, url: "http://" + addr,
		env: append(append(apitest.CleanEnv(), "HTTP_ADDR="+addr, "LOG_LEVEL=warn"), env...)}
	t.Cleanup(in.kill)
	return in
}

// startInstances starts n processes at the same moment and waits until each answers.
func startInstances(t testing.TB, n int, env ...string) []*instance {
	t.Helper()
	ins := make([]*instance, n)
	for i := range ins {
		ins[i] = newInstance(t, env...)
	}
	for _, in := range ins {
		in.launch()
	}
	for _, in := range ins {
		in.waitReady()
	}
	return ins
}

// start starts the process and waits until it answers.
func (in *instance) start() {
	in.t.Helper()
	in.launch()
	in.waitReady()
}

// launch starts the process without waiting.
func (in *instance) launch() {
	in.t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	in.stderr = &syncBuffer{}
	in.cmd = exec.Command(apitest.Binary(in.t))
	in.cmd.Env = in.env
	in.cmd.Stderr = in.stderr
	if err := in.cmd.Start(); err != nil {
		in.t.Fatal(err)
	}
	done := make(chan struct{})
	in.done = done
	cmd := in.cmd
	go func() { _ = cmd.Wait(); close(done) }()
}

// waitReady polls until the process serves /query (a readiness poll, not a timing
// assertion); it fails the test if the process exits first.
func (in *instance) waitReady() {
	in.t.Helper()
	c := &http.Client{Timeout: time.Second}
	rebinds := 0
	for range 1200 {
		select {
		case <-in.done:
			// freeAddr's port can be taken by another process between its check
			// and the server's listen: take another one and start again.
			if rebinds < 5 && strings.Contains(in.stderr.String(), "set HTTP_ADDR to another address") {
				rebinds++
				in.rebind()
				in.launch()
				continue
			}
			in.t.Fatalf("%s exited at start:\n%s", in.addr, in.stderr)
		default:
		}
		res, err := c.Post(in.url+"/query", "application/json", strings.NewReader(`{"query":"{ __typename }"}`))
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			// The answer must come from this process: another test's
			// instance may have taken the port first, and this one is about
			// to find it in use (a test then talked to another database).
			if res.StatusCode == http.StatusOK && in.listening() {
				return
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	in.t.Fatalf("%s did not start:\n%s", in.addr, in.stderr)
}

// listening reports whether this process (not another one) listens on the
// instance's port: a LISTEN socket of that port in /proc/net/tcp whose inode is
// one of the process's file descriptors.
func (in *instance) listening() bool {
	in.mu.Lock()
	pid, addr := in.cmd.Process.Pid, in.addr
	in.mu.Unlock()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return true // no /proc: nothing to check with
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		// local_address is f[1] (hex ip:port), st is f[3] (0A: LISTEN), inode f[9].
		if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", n)) {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[link] {
			return true
		}
	}
	return false
}

// rebind moves the instance to a fresh loopback address (before a launch).
func (in *instance) rebind() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.addr = freeAddr(in.t)
	in.url = "http://" + in.addr
	for i, kv := range in.env {
		if strings.HasPrefix(kv, "HTTP_ADDR=") {
			in.env[i] = "HTTP_ADDR=" + in.addr
		}
	}
}

// signalKill SIGKILLs the process and waits until it is gone.
func (in *instance) signalKill() {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func (in *instance) kill() { in.signalKill() }

// exited reports whether the process has ended.
func (in *instance) exited() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// httpClient is shared by the tests; it keeps enough idle connections for the loads.
var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 0},
}

// response is a decoded GraphQL-over-HTTP answer.
type response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   struct {
		Data       json.RawMessage  `json:"data"`
		Errors     []map[string]any `json:"errors"`
		Extensions map[string]any   `json:"extensions"`
	}
}

// code is the extensions.code of the first error, or "".
func (r *response) code() string {
	if len(r.Body.Errors) == 0 {
		return ""
	}
	ext, _ := r.Body.Errors[0]["extensions"].(map[string]any)
	c, _ := ext["code"].(string)
	return c
}

// field returns data[name] as an object.
func (r *response) field(name string) map[string]any {
	var m map[string]map[string]any
	_ = json.Unmarshal(r.Body.Data, &m)
	return m[name]
}

func (r *response) String() string { return fmt.Sprintf("HTTP %d %s", r.Status, r.Raw) }

// post sends a GraphQL request; err is a transport error (or an undecodable body).
func (in *instance) post(token, query string, vars map[string]any, headers ...string) (*response, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	return in.postRaw(token, "application/json", body, headers...)
}

// postRaw posts body as is.
func (in *instance) postRaw(token, contentType string, body []byte, headers ...string) (*response, error) {
	req, err := http.NewRequest(http.MethodPost, in.url+"/query", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	apitest.SetHeaders(req, token, headers...)
	return do(req)
}

// do sends req and decodes the answer.
func do(req *http.Request) (*response, error) {
	res, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	r := &response{Status: res.StatusCode, Header: res.Header}
	if r.Raw, err = io.ReadAll(res.Body); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(r.Raw, &r.Body); err != nil {
		return r, fmt.Errorf("HTTP %d, undecodable body %q: %w", res.StatusCode, r.Raw, err)
	}
	return r, nil
}

// mustPost posts and fails the test on a transport error or a GraphQL error.
func (in *instance) mustPost(t testing.TB, token, query string, vars map[string]any) *response {
	t.Helper()
	r, err := in.post(token, query, vars)
	if err != nil {
		t.Fatalf("%s: %v", in.addr, err)
	}
	if len(r.Body.Errors) > 0 {
		t.Fatalf("%s: %s", in.addr, r)
	}
	return r
}

// get fetches a path of the instance.
func (in *instance) get(path string) (int, []byte, error) {
	res, err := httpClient.Get(in.url + path)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// healthz returns the /healthz status and body.
func (in *instance) healthz(t testing.TB) (int, map[string]any) {
	t.Helper()
	code, b, err := in.get("/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("/healthz body %q: %v", b, err)
	}
	return code, m
}

// metric returns the value of an unlabelled metric served at /metrics.
func (in *instance) metric(t testing.TB, name string) float64 {
	t.Helper()
	_, b, err := in.get("/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// awaitSubscriptions waits (at most a minute) until in reports n
// subscriptions open (taskflow_subscriptions_open). A subscription without a
// cursor starts from when the server took it, not from when the client sent
// it, and it counts as open only once it has taken that start: a change
// committed after this returns reaches it, one committed before may not.
func (in *instance) awaitSubscriptions(t testing.TB, n float64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if in.metric(t, "taskflow_subscriptions_open") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v subscriptions open after a minute, want %v", in.metric(t, "taskflow_subscriptions_open"), n)
		}
	}
}

// openPool opens a pool on the test database.
func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var userSeq atomic.Int64

// newUser inserts a user and a bearer token through SQL and returns the user's
// id and token.
func newUser(t testing.TB, pool *pgxpool.Pool, name string) (id, token string) {
	t.Helper()
	ctx := context.Background()
	email := fmt.Sprintf("%s-%d@example.com", strings.ToLower(name), userSeq.Add(1))
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, $2, 'x') RETURNING id`,
		email, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	token = auth.NewToken()
	if _, err := pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 day')`,
		auth.HashToken(token), id); err != nil {
		t.Fatal(err)
	}
	return id, token
}

// newProject creates a workspace and a project of the token's user through the
// API and returns the project id.
func newProject(t testing.TB, in *instance, token string) string {
	t.Helper()
	w := in.mustPost(t, token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)
	p := in.mustPost(t, token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "P"}) { id } }`,
		map[string]any{"w": w.field("createWorkspace")["id"]})
	return p.field("createProject")["id"].(string)
}

// count runs a count(*) query.
func count(t testing.TB, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// createTask is the keyed mutation the write loads send.
const createTask = `mutation($in: CreateTaskInput!, $key: String) {
	createTask(input: $in, idempotencyKey: $key) { id title } }`

// taskVars are the variables of the i-th task of a load.
func taskVars(project string, i int) map[string]any {
	return map[string]any{"in": map[string]any{"projectId": project, "title": fmt.Sprintf("task-%d", i)},
		"key": fmt.Sprintf("key-%d", i)}
}
