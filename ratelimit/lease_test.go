package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

// leasing returns a limiter on the shared Redis under prefix with leases of at
// most share of a budget lasting period (share < 0: leases off).
func leasing(t *testing.T, rdb redis.UniversalClient, prefix string, share float64, period time.Duration, reg prometheus.Registerer) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Options{Redis: rdb, KeyPrefix: prefix, Log: quiet, Registerer: reg,
		Config: ratelimit.Config{Lease: share, LeasePeriod: period}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// leasingAndExact returns two limiters on one budget store: a with leases of
// at most 10% lasting period, other checking every operation in Redis (what
// Redis holds, as another instance sees it), and a budget of 1000 points an
// hour.
func leasingAndExact(t *testing.T, period time.Duration) (a, other *ratelimit.Limiter, lim ratelimit.Limit) {
	t.Helper()
	rdb := ratelimittest.Redis(t)
	prefix := ratelimittest.Prefix()
	a = leasing(t, rdb, prefix, 0.1, period, nil)
	other = leasing(t, rdb, prefix, -1, time.Hour, nil)
	return a, other, ratelimit.Limit{Points: 1000, Window: time.Hour}
}

// On one instance, leases change nothing a client can see: the same sequence of
// answers as a check in Redis per operation (allowed, points left, the refusal
// and its Retry-After), while most of them cost no round trip.
func TestLeaseAnswersAsPerOperationChecks(t *testing.T) {
	t.Parallel()
	rdb := ratelimittest.Redis(t)
	ctx := context.Background()
	// 100 points an hour: one point comes back every 36 s, so none does during
	// the test and every answer is exact.
	lim := ratelimit.Limit{Points: 100, Window: time.Hour}
	reg := prometheus.NewRegistry()
	on := leasing(t, rdb, ratelimittest.Prefix(), 0.5, time.Hour, reg)
	off := leasing(t, rdb, ratelimittest.Prefix(), -1, time.Hour, nil)
	costs := []int{3, 1, 1, 5, 2, 3, 0, 7, 1, 1, 4, 2, 9, 1, 1, 1, 3, 2, 6}
	for round := 0; ; round++ {
		n := costs[round%len(costs)]
		a, b := on.AllowN(ctx, "cost", "u:1", lim, n), off.AllowN(ctx, "cost", "u:1", lim, n)
		t.Logf("%d n=%d leased %d exact %d", round, n, a.Remaining, b.Remaining)
		if a.Allowed != b.Allowed || a.Remaining != b.Remaining {
			t.Fatalf("operation %d (cost %d): leased %+v, per operation %+v", round, n, a, b)
		}
		if d := a.ResetAfter - b.ResetAfter; d < -time.Second || d > time.Second {
			t.Fatalf("operation %d: reset %v leased, %v per operation", round, a.ResetAfter, b.ResetAfter)
		}
		if !a.Allowed {
			if d := a.RetryAfter - b.RetryAfter; d < -time.Second || d > time.Second || a.RetryAfter < 30*time.Second {
				t.Fatalf("refusal: retry after %v leased, %v per operation", a.RetryAfter, b.RetryAfter)
			}
			if spent := 100 - a.Remaining; spent < 100-n+1 {
				t.Fatalf("refused with %d points left for a cost of %d", a.Remaining, n)
			}
			break
		}
		if round > 200 {
			t.Fatal("never refused")
		}
	}
	if got := metricValue(t, reg, "taskflow_ratelimit_leased_total"); got < 10 {
		t.Fatalf("only %v checks were answered from a lease", got)
	}
}

// Two instances spending one budget as fast as they can, concurrently, never
// spend more than it holds, and do spend all of it: leased points are charged in
// Redis first, and each instance spends its lease before it is refused.
func TestLeasesNeverOverspendAcrossInstances(t *testing.T) {
	t.Parallel()
	rdb := ratelimittest.Redis(t)
	prefix := ratelimittest.Prefix()
	lim := ratelimit.Limit{Points: 300, Window: 10 * time.Hour} // a point back every 2 minutes
	a := leasing(t, rdb, prefix, 0.5, time.Hour, nil)
	b := leasing(t, rdb, prefix, 0.5, time.Hour, nil)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for refused := 0; refused < 20; {
				if l.AllowN(context.Background(), "cost", "u:1", lim, 1).Allowed {
					allowed.Add(1)
					refused = 0
				} else {
					refused++
				}
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 300 {
		t.Fatalf("%d points spent of a budget of 300", got)
	}
}

// A lease a quiet budget holds goes back to Redis when its period ends, so
// another instance sees the budget as spent, not as leased.
func TestLeaseGivenBackWhenQuiet(t *testing.T) {
	t.Parallel()
	a, other, lim := leasingAndExact(t, 200*time.Millisecond)
	ctx := context.Background()
	a.AllowN(ctx, "cost", "u:1", lim, 2)
	if r := a.AllowN(ctx, "cost", "u:1", lim, 2); !r.Allowed || r.Remaining != 996 {
		t.Fatalf("second operation: %+v", r)
	}
	if r := other.AllowN(ctx, "cost", "u:1", lim, 0); r.Remaining >= 996 {
		t.Fatalf("no lease taken: another instance sees %d left", r.Remaining)
	}
	eventually(t, "the lease comes back", func() bool {
		return other.AllowN(ctx, "cost", "u:1", lim, 0).Remaining == 996
	})
}

// Close gives every lease back (a graceful shutdown returns what it holds).
func TestLeaseGivenBackAtClose(t *testing.T) {
	t.Parallel()
	a, other, lim := leasingAndExact(t, time.Hour)
	ctx := context.Background()
	for range 3 {
		a.AllowN(ctx, "cost", "u:1", lim, 5)
	}
	if r := other.AllowN(ctx, "cost", "u:1", lim, 0); r.Remaining >= 985 {
		t.Fatalf("no lease taken: another instance sees %d left", r.Remaining)
	}
	a.Close()
	if r := other.AllowN(ctx, "cost", "u:1", lim, 0); r.Remaining != 985 {
		t.Fatalf("after Close another instance sees %d left, want 985", r.Remaining)
	}
}
