package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// Limit is a budget: Points refilled continuously over Window.
type Limit struct {
	Points int
	Window time.Duration
}

// emission is the time one point takes to come back.
func (l Limit) emission() time.Duration { return l.Window / time.Duration(max(l.Points, 1)) }

// Result is the answer of one GCRA check.
type Result struct {
	// Allowed says whether the n points were taken.
	Allowed bool
	// Remaining is how many points are left right now.
	Remaining int
	// RetryAfter is how long until the same n points would be allowed (0 when allowed).
	RetryAfter time.Duration
	// ResetAfter is how long until the budget is full again.
	ResetAfter time.Duration
}

// resolution is the precision of every duration the limiter answers: Redis'
// clock (TIME) counts microseconds, and the scripts compute in float seconds
// since 2017, whose last digits (tens of nanoseconds at today's dates) are
// rounding noise. Answers of every backend are rounded to it, so the same
// operations give the same numbers in process and in Redis.
const resolution = time.Microsecond

// exact rounds a duration of an answer to the resolution.
func exact(d time.Duration) time.Duration { return d.Round(resolution) }

// remainingFrom derives the points left from the time until the budget is
// full: the whole points back, a point counting as back when less than the
// resolution of it is missing. Without that slack the first charge of a fresh
// budget, which is exactly on a point's boundary, would lose a point to the
// rounding of one backend and not another (998 in Redis, 999 in process, after
// a 1-point query on a budget of 1000). Integer arithmetic, meant for
// emission intervals far above the resolution (the contract's is 60 ms).
func remainingFrom(l Limit, resetAfter time.Duration) int {
	if resetAfter <= 0 {
		return l.Points
	}
	r := (l.Window - resetAfter + resolution) / l.emission()
	return int(min(max(r, 0), time.Duration(l.Points)))
}

// answer is the Result of a check with its durations rounded to the
// resolution and the points left derived from them, the same way for every
// backend.
func answer(l Limit, allowed bool, retryAfter, resetAfter time.Duration) Result {
	res := Result{Allowed: allowed, ResetAfter: max(exact(resetAfter), 0)}
	if !allowed {
		res.RetryAfter = max(exact(retryAfter), resolution)
	}
	res.Remaining = remainingFrom(l, res.ResetAfter)
	return res
}

// backend is one GCRA implementation.
type backend interface {
	allowN(ctx context.Context, key string, l Limit, n int) (Result, error)
}

// memoryStore is GCRA in process: per key the theoretical arrival time (TAT).
type memoryStore struct {
	mu    sync.Mutex
	tat   map[string]time.Time
	calls int
	now   func() time.Time
}

func newMemoryStore() *memoryStore {
	return &memoryStore{tat: map[string]time.Time{}, now: time.Now}
}

// allowN is the same algorithm as redis_rate's Lua script.
func (m *memoryStore) allowN(_ context.Context, key string, l Limit, n int) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.calls++
	if m.calls%4096 == 0 {
		for k, t := range m.tat {
			if !t.After(now) {
				delete(m.tat, k)
			}
		}
	}
	tat, ok := m.tat[key]
	if !ok || tat.Before(now) {
		tat = now
	}
	increment := time.Duration(n) * l.emission()
	newTat := tat.Add(increment)
	allowAt := newTat.Add(-l.Window)
	if now.Before(allowAt) {
		return answer(l, false, allowAt.Sub(now), tat.Sub(now)), nil
	}
	if newTat.After(now) {
		m.tat[key] = newTat
	}
	return answer(l, true, 0, newTat.Sub(now)), nil
}

// redisStore is GCRA in Redis through redis_rate: one atomic script per check.
type redisStore struct {
	lim    *redis_rate.Limiter
	prefix string
}

func (s *redisStore) allowN(ctx context.Context, key string, l Limit, n int) (Result, error) {
	res, err := s.lim.AllowN(ctx, s.prefix+key, redis_rate.Limit{Rate: l.Points, Burst: l.Points, Period: l.Window}, n)
	if err != nil {
		return Result{}, err
	}
	return answer(l, res.Allowed > 0 || n == 0, res.RetryAfter, res.ResetAfter), nil
}

var _ backend = (*redisStore)(nil)
