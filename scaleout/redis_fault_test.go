package scaleout_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"taskflow/ratelimit/ratelimittest"
	"taskflow/store/storetest"
)

// Redis cut in the middle of a run: as documented, rate limiting fails open to
// the in-process limiter; no request fails (no 5xx, no 429 within the budget),
// /healthz stays 200 and says "degraded", and when Redis is back the instances
// keep their budgets in it again, without a restart.
func TestRedisCutMidRun(t *testing.T) {
	t.Parallel()
	rds := ratelimittest.StartRedis(t)
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	ins := startInstances(t, 2, "DATABASE_URL="+dbURL, "REDIS_URL=redis://"+rds.Addr()+"/0")
	_, token := newUser(t, pool, "ann")
	project := newProject(t, ins[0], token)
	rc := rds.Client()

	load := func(from, n int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := from; i < from+n; i++ {
			wg.Go(func() {
				in := ins[i%2]
				q, vars := `{ me { id workspaces { id } } }`, map[string]any(nil)
				if i%3 == 0 {
					q, vars = createTask, taskVars(project, i)
				}
				r, err := in.post(token, q, vars)
				if err != nil || r.Status != 200 || r.code() != "" {
					t.Errorf("request %d on %s: %v %v", i, in.addr, err, r)
				}
			})
		}
		wg.Wait()
	}
	load(0, 30)
	if n, err := rc.DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Fatalf("Redis holds %d keys (%v) before the cut", n, err)
	}

	rds.Stop()
	load(100, 60)
	for _, in := range ins {
		code, body := in.healthz(t)
		redisHealth, _ := body["redis"].(map[string]any)
		if code != 200 || body["status"] != "degraded" || redisHealth["ok"] != false {
			t.Errorf("/healthz on %s with Redis down: %d %v", in.addr, code, body)
		}
	}

	rds.Start() // the same port, empty: no persistence
	for _, in := range ins {
		ok := false
		for range 400 { // the health check reconnects; not a timing assertion
			if code, body := in.healthz(t); code == 200 && body["status"] == "ok" {
				ok = true
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if !ok {
			t.Fatalf("%s: /healthz never ok again after Redis came back", in.addr)
		}
	}
	// The limiters probe Redis and go back to it: budgets appear in the
	// restarted (empty) Redis again.
	back := false
	for i := range 200 {
		load(1000+10*i, 4)
		if n, err := rc.DBSize(context.Background()).Result(); err == nil && n > 0 {
			back = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !back {
		t.Fatal("the instances never keep budgets in Redis again")
	}
	load(5000, 30)
	for _, in := range ins {
		if in.exited() {
			t.Fatalf("%s exited:\n%s", in.addr, in.stderr)
		}
	}
}
