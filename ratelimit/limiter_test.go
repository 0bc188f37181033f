package ratelimit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newLimiter(t *testing.T, rdb redis.UniversalClient, reg prometheus.Registerer) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Options{Redis: rdb, KeyPrefix: ratelimittest.Prefix(), Log: quiet,
		Registerer: reg, ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// eventually polls cond until it holds (the test's own deadline is the bound).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestGCRA(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]func(t *testing.T) redis.UniversalClient{
		"memory": func(*testing.T) redis.UniversalClient { return nil },
		"redis":  func(t *testing.T) redis.UniversalClient { return ratelimittest.Redis(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t, rdb(t), nil)
			ctx := context.Background()
			lim := ratelimit.Limit{Points: 4, Window: 2 * time.Second}
			if r := l.AllowN(ctx, "x", "k", lim, 3); !r.Allowed || r.Remaining != 1 || r.ResetAfter <= 0 || r.ResetAfter > 2*time.Second {
				t.Fatalf("first 3 points: %+v", r)
			}
			r := l.AllowN(ctx, "x", "k", lim, 2)
			if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 500*time.Millisecond || r.Remaining > 1 {
				t.Fatalf("2 more points with 1 left: %+v", r)
			}
			// A refusal charges nothing: the last point is still there.
			if r := l.AllowN(ctx, "x", "k", lim, 1); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("the last point: %+v", r)
			}
			// Zero points reads the budget without charging.
			if r := l.AllowN(ctx, "x", "other", lim, 0); !r.Allowed || r.Remaining != 4 {
				t.Fatalf("peek of a fresh key: %+v", r)
			}
			eventually(t, "the budget refills", func() bool { return l.AllowN(ctx, "x", "k", lim, 4).Allowed })
		})
	}
}

func TestRedisOutageFailsOpenAndRecovers(t *testing.T) {
	t.Parallel()
	srv := ratelimittest.StartRedis(t)
	rdb := srv.Client()
	reg := prometheus.NewRegistry()
	l := newLimiter(t, rdb, reg)
	ctx := context.Background()
	lim := ratelimit.Limit{Points: 10, Window: time.Minute}

	if r := l.AllowN(ctx, "x", "k", lim, 4); !r.Allowed || r.Remaining != 6 {
		t.Fatalf("with Redis: %+v", r)
	}
	if st := l.Status(); st.Backend != "redis" || !st.Healthy {
		t.Fatalf("status with Redis: %+v", st)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 1 {
		t.Fatalf("Redis holds %d keys, want the one budget", n)
	}

	srv.Stop()
	r := l.AllowN(ctx, "x", "k", lim, 4)
	if !r.Allowed {
		t.Fatalf("during the outage the limiter must fail open: %+v", r)
	}
	st := l.Status()
	if st.Backend != "memory-fallback" || st.Healthy || st.Error == "" {
		t.Fatalf("status during the outage: %+v", st)
	}
	if got := metricValue(t, reg, "taskflow_ratelimit_redis_up"); got != 0 {
		t.Fatalf("redis_up = %v during the outage", got)
	}
	// The in-process limiter still limits.
	for l.AllowN(ctx, "x", "k", lim, 4).Allowed {
	}

	srv.Start()
	eventually(t, "the limiter goes back to Redis", l.Healthy)
	if r := l.AllowN(ctx, "x", "k2", lim, 1); !r.Allowed {
		t.Fatalf("after recovery: %+v", r)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 1 {
		t.Fatalf("after recovery Redis holds %d keys, want the new budget", n)
	}
}

// metricValue returns the value of the first sample of a gauge or counter.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// A charge the budget refuses beside /query (a download, an export's page)
// counts as limited, as a refused operation does.
func TestRefusedChargesAreCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Points: 10, Window: time.Hour},
		KeyPrefix: ratelimittest.Prefix(), Registerer: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	limited := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "taskflow_ratelimit_operations_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, p := range m.GetLabel() {
					labels[p.GetName()] = p.GetValue()
				}
				if labels["limit"] == "cost" && labels["outcome"] == "limited" {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	ctx := context.Background()
	for _, c := range []struct {
		points  int64
		refused bool
	}{{8, false}, {5, true}, {2, false}, {1, true}} {
		if o := l.Charge(ctx, "u1", c.points); (o.Limited != "") != c.refused {
			t.Fatalf("charge of %d: limited %q", c.points, o.Limited)
		}
	}
	if n := limited(); n != 2 {
		t.Fatalf("limited = %v, want 2", n)
	}
}

// Work a check lets through (Reserve; AffordWork and AffordScan hold the
// same way) is held against the caller's budget on the instance until it is
// released: a second check, and a read of the budget (Afford), see the
// budget without it; released (once, however often release is called), the
// budget pays again. A refused check holds nothing, and another caller's
// budget is not concerned.
func TestReservedWorkIsHeldUntilReleased(t *testing.T) {
	t.Parallel()
	l, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Window: 24 * time.Hour},
		KeyPrefix: ratelimittest.Prefix(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	ctx := context.Background()
	if o := l.Charge(ctx, "u", 1000-15); o.Limited != "" {
		t.Fatal("spending the budget: refused")
	}
	o, first := l.Reserve(ctx, "u", 10, 10)
	if o.Limited != "" {
		t.Fatalf("10 points of 15: %+v", o)
	}
	o, second := l.Reserve(ctx, "u", 10, 10)
	if o.Limited == "" || o.RetryAfter <= 0 {
		t.Fatalf("10 more points with 10 of 15 held: %+v, want refused", o)
	}
	second() // holds nothing
	if o := l.Afford(ctx, "u", 6); o.Limited == "" {
		t.Errorf("6 points with 10 of 15 held: allowed")
	}
	if o := l.Afford(ctx, "u", 5); o.Limited != "" {
		t.Errorf("5 points with 10 of 15 held: refused")
	}
	if o, other := l.Reserve(ctx, "v", 10, 10); o.Limited != "" {
		t.Errorf("another user's 10 points: refused")
	} else {
		other()
	}
	first()
	first()
	o, third := l.Reserve(ctx, "u", 15, 15)
	if o.Limited != "" {
		t.Fatalf("15 points of 15 once released: %+v", o)
	}
	third()
	if o := l.Afford(ctx, "u", 15); o.Limited != "" || o.Budget.Remaining != 15 {
		t.Errorf("after every release: %+v, want 15 left and nothing held", o)
	}
	// Of 12 asked for, 10 charged at once and 2 later: only those 2 are
	// held (the 10 are taken from the budget itself).
	o, part := l.Reserve(ctx, "u", 12, 2)
	if o.Limited != "" || l.Charge(ctx, "u", 10).Limited != "" {
		t.Fatalf("12 of 15: %+v", o)
	}
	if o := l.Afford(ctx, "u", 3); o.Limited != "" {
		t.Errorf("3 points with 5 left and 2 held: refused")
	}
	if o := l.Afford(ctx, "u", 4); o.Limited == "" {
		t.Errorf("4 points with 5 left and 2 held: allowed")
	}
	part()
}
