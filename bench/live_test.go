package bench

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/auth"
	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
)

// BenchmarkLiveSubscriptions measures live subscriptions on one real server
// process (the binary, its own Postgres database, no Redis): LIVE_SUBS
// (default 1000) graphql-ws connections of one subscription each, over 100
// projects of 10 users' workspace, then LIVE_RATE (default 100) createTask
// per second spread over the projects for LIVE_SECONDS (default 20). It
// reports
//
//   - the server's RSS per open connection (VmRSS after opening them, less
//     before, over their number);
//   - delivery latency, p50 and p99 over every delivery (each change reaches
//     the 10 subscribers of its project), from the event's occurredAt (taken
//     just before the commit, the server's clock, the same machine's) to the
//     client reading the item;
//   - createTask throughput at 16 in flight for 5 s, without subscriptions
//     and with them open (idle), alternating, three pairs.
//
// The clients run in the benchmark's process, on the same 2 cores.
//
//	go test ./bench -run '^$' -bench LiveSubscriptions -benchtime 1x
func BenchmarkLiveSubscriptions(b *testing.B) {
	subs, rate, seconds := envInt("LIVE_SUBS", 1000), envInt("LIVE_RATE", 100), envInt("LIVE_SECONDS", 20)
	for b.Loop() {
		runLive(b, subs, rate, seconds)
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// liveServer is the server process of the benchmark.
type liveServer struct {
	url string
	cmd *exec.Cmd
}

func startLiveServer(b *testing.B, dbURL string) *liveServer {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(apitest.Binary(b))
	cmd.Env = append(apitest.CleanEnv(), "HTTP_ADDR="+addr, "DATABASE_URL="+dbURL, "LOG_LEVEL=warn",
		"RATE_LIMIT_POINTS=100000000", "MAX_QUERY_COST=1000", "SUBSCRIPTION_MAX_PER_USER=100000",
		"SUBSCRIPTION_MAX_PER_CLIENT=100000") // the benchmark's 1000 clients all come from 127.0.0.1
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := &liveServer{url: "http://" + addr, cmd: cmd}
	for range 2000 {
		res, err := http.Post(s.url+"/query", "application/json", strings.NewReader(`{"query":"{ __typename }"}`))
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("the server did not start")
	return nil
}

// rss is the server's resident set size in bytes.
func (s *liveServer) rss(b *testing.B) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// post runs one operation and returns data.
func (s *liveServer) post(client *http.Client, token, query string, vars map[string]any) (json.RawMessage, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, s.url+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out struct {
		Data   json.RawMessage
		Errors []any
	}
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Errors) > 0 {
		return nil, fmt.Errorf("%d %s", res.StatusCode, raw)
	}
	return out.Data, nil
}

func runLive(b *testing.B, subs, rate, seconds int) {
	b.Helper()
	ctx := context.Background()
	dbURL := storetest.URL(b)
	srv := startLiveServer(b, dbURL)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	// 10 users, one workspace, 100 projects.
	var tokens []string
	for i := range 10 {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, 'u', 'x') RETURNING id`,
			fmt.Sprintf("u%d@example.com", i)).Scan(&id); err != nil {
			b.Fatal(err)
		}
		tok := auth.NewToken()
		if _, err := pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 day')`,
			auth.HashToken(tok), id); err != nil {
			b.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	data, err := srv.post(client, tokens[0], `mutation { createWorkspace(input: {name: "Live"}) { id } }`, nil)
	if err != nil {
		b.Fatal(err)
	}
	var ws struct{ CreateWorkspace struct{ ID string } }
	_ = json.Unmarshal(data, &ws)
	if _, err := pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role)
		SELECT $1, id, 'MEMBER' FROM users WHERE id NOT IN (SELECT user_id FROM members WHERE workspace_id = $1)`, ws.CreateWorkspace.ID); err != nil {
		b.Fatal(err)
	}
	var projects []string
	for i := range 101 { // the last one: no subscriber
		data, err := srv.post(client, tokens[0], `mutation($w: ID!, $n: String!) { createProject(input: {workspaceId: $w, name: $n}) { id } }`,
			map[string]any{"w": ws.CreateWorkspace.ID, "n": fmt.Sprint("p", i)})
		if err != nil {
			b.Fatal(err)
		}
		var p struct{ CreateProject struct{ ID string } }
		_ = json.Unmarshal(data, &p)
		projects = append(projects, p.CreateProject.ID)
	}

	// Throughput with no subscription, warm.
	createTasks(srv, client, tokens[0], projects[:100], 16, 2*time.Second)
	before := createTasks(srv, client, tokens[0], projects[:100], 16, 5*time.Second)
	runtimeRSS := srv.rss(b)

	// Open the connections.
	var mu sync.Mutex
	var lat []time.Duration
	var delivered atomic.Int64
	conns := make([]*apitest.WS, subs)
	for i := range subs {
		conns[i] = apitest.DialWS(b, srv.url+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + tokens[i%10]}})
		conns[i].Subscribe("1", `subscription($p: ID!) { taskChanges(projectId: $p) { cursor occurredAt taskId } }`,
			map[string]any{"p": projects[i%100]})
	}
	// Every subscription is open once a change of each project reached it.
	for _, p := range projects {
		if _, err := srv.post(client, tokens[0], `mutation($p: ID!) { createTask(input: {projectId: $p, title: "warm"}) { id } }`,
			map[string]any{"p": p}); err != nil {
			b.Fatal(err)
		}
	}
	var readers sync.WaitGroup
	measuring := atomic.Bool{}
	for _, c := range conns {
		readers.Go(func() {
			for {
				m, err := c.TryNext()
				if err != nil {
					return
				}
				at := time.Now()
				var p struct {
					Data struct {
						TaskChanges struct{ OccurredAt time.Time }
					}
				}
				if m.Type != "next" || json.Unmarshal(m.Payload, &p) != nil {
					continue
				}
				delivered.Add(1)
				if measuring.Load() {
					mu.Lock()
					lat = append(lat, at.Sub(p.Data.TaskChanges.OccurredAt))
					mu.Unlock()
				}
			}
		})
	}
	for delivered.Load() < int64(subs) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	openRSS := srv.rss(b)

	// The paced load.
	lagBefore := srv.lagBuckets(b, client)
	measuring.Store(true)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	var writers sync.WaitGroup
	stop := time.Now().Add(time.Duration(seconds) * time.Second)
	var sent, failed atomic.Int64
	for i := 0; time.Now().Before(stop); i++ {
		<-tick.C
		writers.Go(func() {
			sent.Add(1)
			if _, err := srv.post(client, tokens[i%10], `mutation($p: ID!) { createTask(input: {projectId: $p, title: "load"}) { id } }`,
				map[string]any{"p": projects[i%100]}); err != nil {
				failed.Add(1)
			}
		})
	}
	tick.Stop()
	writers.Wait()
	want := int64(subs) + sent.Load()*int64(subs/100)
	for deadline := time.Now().Add(30 * time.Second); delivered.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	measuring.Store(false)
	lagAfter := srv.lagBuckets(b, client)

	// createTask throughput with the subscriptions open, in a project none
	// watches (the tailer still reads every event), then in the watched
	// ones (each change is delivered to the 10 subscribers of its project),
	// then with them closed.
	unwatched := createTasks(srv, client, tokens[0], projects[100:], 16, 5*time.Second)
	projects = projects[:100]
	with := createTasks(srv, client, tokens[0], projects, 16, 5*time.Second)
	for _, c := range conns {
		_ = c.Conn.CloseNow()
	}
	readers.Wait()
	for srv.metric(b, client, "taskflow_subscriptions_open") > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	after := createTasks(srv, client, tokens[0], projects, 16, 5*time.Second)

	mu.Lock()
	slices.Sort(lat)
	n := len(lat)
	mu.Unlock()
	if n == 0 {
		b.Fatal("no delivery measured")
	}
	pct := func(p float64) time.Duration { return lat[min(n-1, int(float64(n)*p))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[n-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(openRSS-runtimeRSS)/float64(subs)/1024, "rss-KiB/conn")
	b.ReportMetric(float64(delivered.Load()), "deliveries")
	b.Logf("%d subscriptions, %d changes sent (%d failed) at %d/s for %ds: %d deliveries measured (want %d in all, got %d)",
		subs, sent.Load(), failed.Load(), rate, seconds, n, want, delivered.Load())
	b.Logf("latency commit→client p50 %v p99 %v max %v", pct(0.5), pct(0.99), lat[n-1])
	b.Logf("the server's own lag, commit→hand-over to the transport (taskflow_subscription_lag_seconds): p50 ≤ %s, p99 ≤ %s",
		bucketPct(lagBefore, lagAfter, 0.5), bucketPct(lagBefore, lagAfter, 0.99))
	b.Logf("RSS %d MiB before, %d MiB with %d connections open: %.1f KiB each", runtimeRSS>>20, openRSS>>20, subs,
		float64(openRSS-runtimeRSS)/float64(subs)/1024)
	b.ReportMetric(with, "rps-with")
	b.ReportMetric(unwatched, "rps-unwatched")
	b.ReportMetric(before, "rps-before")
	b.ReportMetric(after, "rps-after")
	b.Logf("createTask rps at 16 in flight: %.0f before the subscriptions; with %d open: %.0f in a project none watches, "+
		"%.0f in the watched ones (%d deliveries each); %.0f after they closed", before, subs, unwatched, with, subs/100, after)
}

// createTasks runs createTask at inFlight concurrency for d and returns the
// requests per second.
func createTasks(srv *liveServer, client *http.Client, token string, projects []string, inFlight int, d time.Duration) float64 {
	var done atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range inFlight {
		wg.Go(func() {
			for i := w; time.Now().Before(stop); i += inFlight {
				if _, err := srv.post(client, token, `mutation($p: ID!) { createTask(input: {projectId: $p, title: "t"}) { id } }`,
					map[string]any{"p": projects[i%len(projects)]}); err == nil {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

// metric reads an unlabelled gauge or counter of /metrics.
func (s *liveServer) metric(b *testing.B, client *http.Client, name string) float64 {
	b.Helper()
	res, err := client.Get(s.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// lagBuckets reads the cumulative buckets of taskflow_subscription_lag_seconds.
func (s *liveServer) lagBuckets(b *testing.B, client *http.Client) map[string]float64 {
	b.Helper()
	res, err := client.Get(s.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), `taskflow_subscription_lag_seconds_bucket{le="`); ok {
			le, v, _ := strings.Cut(rest, `"} `)
			out[le], _ = strconv.ParseFloat(v, 64)
		}
	}
	return out
}

// bucketPct is the upper bound of the bucket holding the p-th quantile of
// the observations between two reads of the histogram.
func bucketPct(before, after map[string]float64, p float64) string {
	type bk struct {
		le float64
		s  string
		n  float64
	}
	var bs []bk
	for le, n := range after {
		f, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			f, err = 1e18, nil
		}
		if err == nil {
			bs = append(bs, bk{f, le, n - before[le]})
		}
	}
	slices.SortFunc(bs, func(a, b bk) int { return cmpFloat(a.le, b.le) })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return "?"
	}
	total := bs[len(bs)-1].n
	for _, x := range bs {
		if x.n >= p*total {
			return x.s + "s"
		}
	}
	return "+Inf"
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
