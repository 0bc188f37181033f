package scaleout_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/store/storetest"
)

// limiterHealth returns the /healthz status code, its "status" and its redis
// object.
func limiterHealth(t testing.TB, in *instance) (int, any, map[string]any) {
	t.Helper()
	code, body := in.healthz(t)
	redisHealth, _ := body["redis"].(map[string]any)
	return code, body["status"], redisHealth
}

// One master of a three-master Redis Cluster without replicas is SIGKILLed under
// traffic, so that its slots are down: every request is still answered 200 (the
// load stays within its budgets, so no 429 is legitimate), rate limiting fails
// open to the in-process limiter on each instance, counts the failures and
// /healthz says "degraded" for as long as the node is down (no flapping back to
// "ok" while live nodes answer). When the node is restarted on its port with its
// cluster config file and the cluster is ok again, each instance goes back to
// the cluster by itself and the budgets are shared again.
func TestRedisClusterNodeKilled(t *testing.T) {
	t.Parallel()
	nodes := startRedisClusterNodes(t)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	ins := startInstances(t, 2, append([]string{"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + strings.Join(addrs, ",")}, budgetEnv...)...)

	// The traffic: mostly anonymous queries, each from a client IP of its own
	// (TRUSTED_PROXIES), so that the budget keys cover every node's slots, and
	// signed-in queries spread over enough users that none of them comes near
	// its 300 points.
	tokens := make([]string, 40)
	for i := range tokens {
		_, tokens[i] = newUser(t, pool, "load")
	}
	var seq atomic.Int64
	var mu sync.Mutex
	var failures []string
	send := func() {
		i := seq.Add(1)
		in := ins[i%2]
		var r *response
		var err error
		if i%4 == 0 {
			r, err = in.post(tokens[i/4%int64(len(tokens))], `{ me { id workspaces { id } } }`, nil)
		} else {
			r, err = in.post("", `{ me { id } }`, nil, "X-Forwarded-For", fmt.Sprintf("10.9.%d.%d", i/250%250, i%250+1))
		}
		if err != nil || r.Status != 200 || r.code() != "" {
			mu.Lock()
			failures = append(failures, fmt.Sprintf("request %d on %s: %v %v", i, in.addr, err, r))
			mu.Unlock()
		}
	}
	for range 40 {
		send()
	}
	failuresBefore := make([]float64, len(ins))
	for k, in := range ins {
		if code, status, rh := limiterHealth(t, in); code != 200 || status != "ok" || rh["mode"] != "redis" {
			t.Fatalf("/healthz on %s before the kill: %d %v %v", in.addr, code, status, rh)
		}
		failuresBefore[k] = in.metric(t, "taskflow_ratelimit_redis_failures_total")
	}

	stop := make(chan struct{})
	var load sync.WaitGroup
	for range 4 {
		load.Go(func() {
			for range 1500 { // bounded: the load stops by itself
				select {
				case <-stop:
					return
				default:
				}
				send()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	for seq.Load() < 100 { // the traffic is running
		time.Sleep(5 * time.Millisecond)
	}

	nodes[0].kill()
	for _, in := range ins {
		waitLimiterHealth(t, in, "degraded with a master down", func(code int, status any, rh map[string]any) bool {
			return code == 200 && status == "degraded" && rh["ok"] == false && rh["mode"] == "memory-fallback"
		})
	}
	// For as long as the node is down, over several probe intervals and while
	// the live nodes go on answering PING, /healthz stays degraded.
	for range 30 {
		for _, in := range ins {
			if code, status, rh := limiterHealth(t, in); code != 200 || status != "degraded" || rh["ok"] != false {
				t.Errorf("/healthz on %s with a master down: %d %v %v", in.addr, code, status, rh)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	load.Wait()
	for k, in := range ins {
		if n := in.metric(t, "taskflow_ratelimit_redis_failures_total"); n <= failuresBefore[k] {
			t.Errorf("%s: taskflow_ratelimit_redis_failures_total %v, %v before the kill", in.addr, n, failuresBefore[k])
		}
	}
	mu.Lock()
	for _, f := range failures {
		t.Error(f)
	}
	failures = nil
	mu.Unlock()

	nodes[0].start() // the same port and cluster config file: it rejoins
	waitClusterOK(t, addrs)
	for _, in := range ins { // the limiter's probe finds the cluster whole
		waitLimiterHealth(t, in, "ok again after the node came back", func(code int, status any, rh map[string]any) bool {
			return code == 200 && status == "ok" && rh["mode"] == "redis"
		})
	}
	checkBudgetsShared(t, ins, pool, false)
	for range 40 {
		send()
	}
	for _, f := range failures {
		t.Error(f)
	}
	for _, in := range ins {
		if code, status, rh := limiterHealth(t, in); code != 200 || status != "ok" {
			t.Errorf("/healthz on %s at the end: %d %v %v", in.addr, code, status, rh)
		}
		if in.exited() {
			t.Fatalf("%s exited:\n%s", in.addr, in.stderr)
		}
	}
}

// waitLimiterHealth polls the instance's /healthz until cond holds of it (a
// readiness poll, not a timing assertion) and fails the test if it never does.
func waitLimiterHealth(t *testing.T, in *instance, what string, cond func(code int, status any, rh map[string]any) bool) {
	t.Helper()
	for range 800 {
		if cond(limiterHealth(t, in)) {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	code, status, rh := limiterHealth(t, in)
	t.Fatalf("/healthz on %s never %s: %d %v %v", in.addr, what, code, status, rh)
}
