package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// When a lease's period ends with points left and the next check gives them
// back, the budget in Redis goes back down, and the answers follow it: they
// stay what a check per operation gives. (The sweep, which would give the
// points back on its own, is kept out of the way.)
func TestLeaseAnswersFollowGiveBacks(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := "test:" + uuid.NewString() + ":"
	leased := newLeaseStore(rdb, prefix+"leased:", 0.5, 40*time.Millisecond, func() {})
	leased.every = time.Hour
	t.Cleanup(func() { leased.close(true) })
	exact := &memoryStore{tat: map[string]time.Time{}, now: time.Now}
	ctx := context.Background()
	lim := Limit{Points: 100, Window: time.Hour} // a point comes back every 36 s
	// -1: the lease's period ends before the next check (a sleep longer than
	// the period, not a timing assertion).
	for round, n := range []int{1, 1, -1, 0, 1, 1, -1, 1, 1, 2, -1, 3, 0, 1, -1, 5, 1} {
		if n < 0 {
			time.Sleep(60 * time.Millisecond)
			continue
		}
		a, err := leased.allowN(ctx, "k", lim, n)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := exact.allowN(ctx, "k", lim, n)
		if a.Allowed != b.Allowed || a.Remaining != b.Remaining {
			t.Fatalf("check %d (cost %d): leased %+v, per operation %+v", round, n, a, b)
		}
	}
}

// The points left are the whole points back, with a microsecond of slack for
// the rounding of the Redis scripts, and never more than the budget.
func TestRemainingFrom(t *testing.T) {
	t.Parallel()
	l := Limit{Points: 1000, Window: time.Minute} // a point every 60 ms
	for _, c := range []struct {
		reset time.Duration
		want  int
	}{
		{0, 1000},
		{-time.Second, 1000},
		{60 * time.Millisecond, 999},
		{60*time.Millisecond + 2, 999},                  // Redis' 60.000002 ms for one point
		{60*time.Millisecond + time.Microsecond, 999},   // the slack
		{60*time.Millisecond + 2*time.Microsecond, 998}, // more than the slack
		{120*time.Millisecond - time.Millisecond, 998},  // a millisecond short of two points
		{time.Minute, 0},
		{2 * time.Minute, 0},
	} {
		if got := remainingFrom(l, c.reset); got != c.want {
			t.Errorf("reset %v: %d, want %d", c.reset, got, c.want)
		}
	}
}
