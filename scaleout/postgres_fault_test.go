package scaleout_test

import (
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store/storetest"
)

// viaProxy returns dbURL with its host and port replaced by addr.
func viaProxy(t testing.TB, dbURL, addr string) (proxied, target string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	target = u.Host
	u.Host = addr
	return u.String(), target
}

// proxiedPoolMax is the pool size of startBehindProxy's instance, so that the
// bound on connections after a fault is exact.
const proxiedPoolMax = 4

// startBehindProxy starts an instance on a database of its own that it reaches
// through a TCP proxy the test can cut, with a pool of proxiedPoolMax
// connections; pool is a direct pool to the same database.
func startBehindProxy(t *testing.T) (pool *pgxpool.Pool, proxy *tcpProxy, in *instance) {
	t.Helper()
	dbURL := storetest.URL(t)
	pool = openPool(t, dbURL)
	_, target := viaProxy(t, dbURL, "")
	proxy = newProxy(t, target)
	proxied, _ := viaProxy(t, dbURL, proxy.addr)
	// A budget these tests never spend: with the bearer token remembered for a
	// moment (store.SessionTTL), requests during the outage reach the
	// limiter, and a 429 would hide the UNAVAILABLE they are about.
	in = newInstance(t, "DATABASE_URL="+proxied+"&pool_max_conns="+strconv.Itoa(proxiedPoolMax), "RATE_LIMIT_POINTS=1000000")
	in.start()
	return pool, proxy, in
}

// With Postgres unreachable, requests fail at once with UNAVAILABLE (never hang,
// never another code), /healthz answers 503, and when Postgres is reachable again
// the same process serves again, with no goroutine or connection left over from
// the outage.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	pool, proxy, in := startBehindProxy(t)
	const maxConns = proxiedPoolMax

	_, token := newUser(t, pool, "ann")
	project := newProject(t, in, token)
	queries := []struct {
		query string
		vars  func(i int) map[string]any
	}{
		{createTask, func(i int) map[string]any { return taskVars(project, i) }},
		{`query($id: ID!) { project(id: $id) { name tasks { nodes { id } } } }`,
			func(int) map[string]any { return map[string]any{"id": project} }},
	}
	for i := range 20 { // warm the pool the way a loaded server has it
		for _, q := range queries {
			in.mustPost(t, token, q.query, q.vars(i))
		}
	}
	tasksBefore := count(t, pool, `SELECT count(*) FROM tasks`)
	goroutinesBefore := steadyGoroutines(t, in, pool)

	proxy.cut()
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for i := range 40 {
		wg.Go(func() {
			q := queries[i%2]
			r, err := in.post(token, q.query, q.vars(1000+i))
			switch {
			case err != nil:
				errs <- err.Error()
			case r.code() != "UNAVAILABLE" || r.Status >= 500 && r.Status != 503:
				errs <- "want UNAVAILABLE (200 or 503): " + r.String()
			}
		})
	}
	// An anonymous request that needs no database is still served. It goes
	// first: the password hashes of the two below are charged to the same
	// anonymous caller (this client's IP) and may, on a busy machine, have
	// its next turn paced past MaxTurnPace (RATE_LIMITED, as designed).
	if r, err := in.post("", `{ me { id } }`, nil); err != nil || r.code() != "" {
		t.Errorf("anonymous me during the outage: %v %v", err, r)
	}
	// Anonymous calls reach the database in the resolver: UNAVAILABLE too, never
	// the answer of a wrong password or a taken e-mail.
	for _, q := range []string{
		`mutation { login(email: "ann@example.com", password: "correct horse") { token } }`,
		`mutation { register(input: {email: "new@example.com", password: "correct horse", name: "N"}) { token } }`,
	} {
		if r, err := in.post("", q, nil); err != nil || r.code() != "UNAVAILABLE" || r.Status >= 500 && r.Status != 503 {
			t.Errorf("%s during the outage: %v %v", q, err, r)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	code, body := in.healthz(t)
	if code != 503 || body["status"] != "unavailable" {
		t.Errorf("/healthz during the outage: %d %v", code, body)
	}

	proxy.restore()
	recovered := false
	for range 400 { // waits for the pool to reconnect; not a timing assertion
		if r, err := in.post(token, queries[1].query, queries[1].vars(0)); err == nil && r.code() == "" {
			recovered = true
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if !recovered {
		t.Fatalf("no recovery without restart:\n%s", in.stderr)
	}
	in.mustPost(t, token, createTask, taskVars(project, 5000))
	if code, body := in.healthz(t); code != 200 || body["status"] != "ok" {
		t.Errorf("/healthz after recovery: %d %v", code, body)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != tasksBefore+1 {
		t.Errorf("%d tasks after the outage, want %d: a failed request wrote", n, tasksBefore+1)
	}

	checkNoLeak(t, in, proxy, goroutinesBefore, maxConns, "the outage")
}

// steadyGoroutines returns the server's goroutine count once it is steady:
// after River (the webhook workers) has elected this instance its leader, which
// starts River's maintenance services (a dozen goroutines or more), and after
// the count has not moved for a second. A count taken before the election is
// below what the same process runs after any outage, when River elects again
// and restarts them. Each idle keep-alive connection holds a server goroutine,
// so it counts with none.
func steadyGoroutines(t *testing.T, in *instance, pool *pgxpool.Pool) float64 {
	t.Helper()
	for i := 0; count(t, pool, `SELECT count(*) FROM river_leader WHERE expires_at > now()`) == 0; i++ {
		if i == 400 {
			t.Fatalf("River elected no leader:\n%s", in.stderr)
		}
		time.Sleep(25 * time.Millisecond)
	}
	var last float64
	same := 0
	for range 100 { // waits for River's services to start; not a timing assertion
		httpClient.CloseIdleConnections()
		n := in.metric(t, "go_goroutines")
		if n == last {
			if same++; same == 10 {
				break
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// checkNoLeak waits until the server's goroutines settle back to the level
// before a fault and the pool holds no more Postgres connections than its
// maximum, and checks the process is still running.
func checkNoLeak(t *testing.T, in *instance, proxy *tcpProxy, goroutinesBefore float64, maxConns int, after string) {
	t.Helper()
	var goroutines float64
	settled := false
	for range 200 {
		httpClient.CloseIdleConnections()
		goroutines = in.metric(t, "go_goroutines")
		if goroutines <= goroutinesBefore+5 && proxy.open() <= maxConns {
			settled = true
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if !settled {
		t.Errorf("after %s: %v goroutines (before: %v), %d Postgres connections (max %d)\n%s",
			after, goroutines, goroutinesBefore, proxy.open(), maxConns, in.goroutineDump())
		return
	}
	if in.exited() {
		t.Fatalf("the server exited:\n%s", in.stderr)
	}
}

// goroutineDump ends the process with SIGQUIT, on which the Go runtime writes
// every goroutine's stack to stderr, and returns that stderr: which goroutines
// a leak check found left over.
func (in *instance) goroutineDump() string {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	if cmd == nil {
		return "(no process)"
	}
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		in.signalKill()
	}
	return in.stderr.String()
}
