package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"taskflow/errs"
)

// The cost budget prices what an operation does once it runs; what a request
// costs before that (reading its body, parsing, validating and pricing its
// document: a few milliseconds of CPU for a document at the limits) is
// bounded per request but not per caller, and a caller who keeps several such
// requests in flight can take every core of an instance from everyone else.
// So each caller's requests take turns through that phase: one at a time per
// caller (the user, or the client IP of an anonymous caller), on each
// instance. A client's ordinary requests are parsed from the document cache
// in microseconds and barely notice; one client flooding expensive documents
// gets one core at the most, and the others keep theirs.
//
// One core is still a lot on a small machine: in bench/abuse, one client
// flooding 1,400-fragment documents (19 ms each) in its turns took a
// signed-in client's p99 to 4-5 times its idle value on two cores. So turns
// are also paced: the CPU-bound work of a caller's turns (package cpumeter:
// decoding the body, parsing and validating the document, password hashes,
// executing a heavy document; never the time spent waiting on the network,
// Postgres or Redis) is charged to it, and a caller whose turns took more
// than TurnShare of one core, past a burst of TurnBurst, waits before its
// next turn until it is back within it. An honest client's turns take
// microseconds and never wait; a flood of expensive documents gets a quarter
// of a core. The wait is a generic cell rate algorithm on time (the one the
// cost budget uses on points), per instance, in process memory.

// TurnShare is the share of one core a caller's turns may take on average,
// and TurnBurst how much turn time a caller may spend at once before the
// share applies: a hundred milliseconds is about five documents at the
// limits, or the standard introspection query a few dozen times.
const (
	TurnShare = 0.25
	TurnBurst = 100 * time.Millisecond
)

// MaxTurnPace is the longest a request waits for its caller's turns to be
// paid for; a longer wait (only after a single turn of more than about half a
// second) is answered RATE_LIMITED at once, with the wait as retryAfter.
const MaxTurnPace = 2 * time.Second

// MaxWaitingTurns bounds the requests of one caller waiting for their turn on
// an instance: past it a request is answered 429 at once (nothing ran). A
// waiting request holds a goroutine and its connection's buffers (its body is
// not read yet), about 12 KB: 128 of them are 1.5 MB, and more than a browser
// or a client library sends at once (the graphql-http audit sends about 100).
const MaxWaitingTurns = 128

// turns are the callers' turns through the phase before execution.
type turns struct {
	mu      sync.Mutex
	callers map[string]*callerTurn
	// paid holds, per caller whose turns are not paid for yet, when they will
	// be (the theoretical arrival time of the cell rate algorithm); entries
	// in the past are dropped by sweep, once the map doubles.
	paid    map[string]time.Time
	sweepAt int
	// waiting, active and refused count, when set (the limiter's metrics).
	waiting, active interface{ Add(float64) }
	refused         interface{ Inc() }
}

// callerTurn is one caller's turn: the semaphore of its one slot, and how many
// of its requests hold it or wait for it (the entry is dropped at zero).
type callerTurn struct {
	sem   *semaphore.Weighted
	users int
}

// errTooManyWaiting answers a request of a caller with MaxWaitingTurns
// requests waiting already.
var errTooManyWaiting = func() *errs.Error {
	e := errs.Errorf(errs.CodeRateLimited, "too many of your requests are in flight on this server; retry later")
	e.Extensions = map[string]any{"retryAfter": 1}
	return e
}()

// errPaced answers a request whose caller's turns are not paid for within
// MaxTurnPace.
func errPaced(wait time.Duration) *errs.Error {
	e := errs.Errorf(errs.CodeRateLimited, "your recent requests took too much of this server's time to prepare; retry later")
	e.Extensions = map[string]any{"retryAfter": int(math.Ceil(wait.Seconds()))}
	return e
}

// EndTurn ends a turn, charging its caller the time of the turn's CPU-bound
// work (package cpumeter).
type EndTurn func(work time.Duration)

// enter waits for key's turn, and then for key's past turns to be paid for,
// and returns the function that ends it. It fails with RATE_LIMITED
// (retryAfter 1) when MaxWaitingTurns requests of key wait already, with
// RATE_LIMITED (retryAfter the wait) when the pace would wait more than
// MaxTurnPace, and with ctx's error when ctx ends first.
func (t *turns) enter(ctx context.Context, key string) (EndTurn, error) {
	t.mu.Lock()
	if t.callers == nil {
		t.callers = map[string]*callerTurn{}
	}
	c := t.callers[key]
	if c == nil {
		c = &callerTurn{sem: semaphore.NewWeighted(1)}
		t.callers[key] = c
	}
	if c.users > MaxWaitingTurns {
		t.mu.Unlock()
		if t.refused != nil {
			t.refused.Inc()
		}
		return nil, errTooManyWaiting
	}
	c.users++
	t.mu.Unlock()
	if t.waiting != nil {
		t.waiting.Add(1)
		defer t.waiting.Add(-1)
	}
	leave := func() {
		t.mu.Lock()
		if c.users--; c.users == 0 {
			delete(t.callers, key)
		}
		t.mu.Unlock()
	}
	if err := c.sem.Acquire(ctx, 1); err != nil {
		leave()
		return nil, err
	}
	if wait := t.pace(key, time.Now()); wait > 0 {
		err := error(errPaced(wait))
		if wait <= MaxTurnPace {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
				err = nil
			case <-ctx.Done():
				timer.Stop()
				err = ctx.Err()
			}
		}
		if err != nil {
			if t.refused != nil && errs.CodeOf(err) == errs.CodeRateLimited {
				t.refused.Inc()
			}
			c.sem.Release(1)
			leave()
			return nil, err
		}
	}
	if t.active != nil {
		t.active.Add(1)
	}
	return func(work time.Duration) {
		t.charge(key, time.Now(), work)
		if t.active != nil {
			t.active.Add(-1)
		}
		c.sem.Release(1)
		leave()
	}, nil
}

// pace returns how long key must wait at now before its next turn: how far
// its paid-for time is past the burst.
func (t *turns) pace(key string, now time.Time) time.Duration {
	t.mu.Lock()
	at, ok := t.paid[key]
	t.mu.Unlock()
	if !ok {
		return 0
	}
	return at.Sub(now) - time.Duration(float64(TurnBurst)/TurnShare)
}

// charge charges a turn of used to key at now: its turns are paid for
// used/TurnShare later.
func (t *turns) charge(key string, now time.Time, used time.Duration) {
	if used <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.paid == nil {
		t.paid = map[string]time.Time{}
	}
	at := t.paid[key]
	if at.Before(now) {
		at = now
	}
	t.paid[key] = at.Add(time.Duration(float64(used) / TurnShare))
	if len(t.paid) >= t.sweepAt {
		for k, at := range t.paid {
			if at.Before(now) {
				delete(t.paid, k)
			}
		}
		t.sweepAt = 2*len(t.paid) + 64
	}
}

// Turn waits for the caller's turn through the phase before execution (see
// above) and returns the function that ends it, to which the caller passes
// the turn's metered work; the caller is the signed-in
// user, else the client IP. It returns RATE_LIMITED (extensions.retryAfter)
// when too many requests of the caller wait already or its past turns are
// not paid for within MaxTurnPace, and ctx's error when ctx ends first.
func (l *Limiter) Turn(ctx context.Context) (EndTurn, error) {
	return l.turns.enter(ctx, identity(ctx, ""))
}
