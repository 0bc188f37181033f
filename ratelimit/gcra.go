package ratelimit

import (
	"context"
	"math"
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

// remainingFrom derives the points left from the time until the budget is full.
func remainingFrom(l Limit, resetAfter time.Duration) int {
	if resetAfter <= 0 {
		return l.Points
	}
	r := int(math.Floor(float64(l.Window-resetAfter) / float64(l.emission())))
	return min(max(r, 0), l.Points)
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
		reset := tat.Sub(now)
		return Result{Remaining: remainingFrom(l, reset), RetryAfter: allowAt.Sub(now), ResetAfter: reset}, nil
	}
	if newTat.After(now) {
		m.tat[key] = newTat
	}
	reset := newTat.Sub(now)
	return Result{Allowed: true, Remaining: remainingFrom(l, reset), ResetAfter: reset}, nil
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
	out := Result{Allowed: res.Allowed > 0 || n == 0, ResetAfter: max(res.ResetAfter, 0)}
	if !out.Allowed {
		out.RetryAfter = max(res.RetryAfter, time.Millisecond)
	}
	out.Remaining = remainingFrom(l, out.ResetAfter)
	return out, nil
}

var _ backend = (*redisStore)(nil)
