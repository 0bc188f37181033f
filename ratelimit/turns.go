package ratelimit

import (
	"context"
	"sync"

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

// enter waits for key's turn and returns the function that ends it. It fails
// with RATE_LIMITED (retryAfter 1) when MaxWaitingTurns requests of key wait
// already, and with ctx's error when ctx ends first.
func (t *turns) enter(ctx context.Context, key string) (func(), error) {
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
	if t.active != nil {
		t.active.Add(1)
	}
	return func() {
		if t.active != nil {
			t.active.Add(-1)
		}
		c.sem.Release(1)
		leave()
	}, nil
}

// Turn waits for the caller's turn through the phase before execution (see
// above) and returns the function that ends it; the caller is the signed-in
// user, else the client IP. It returns RATE_LIMITED (extensions.retryAfter 1)
// when too many requests of the caller wait already, and ctx's error when ctx
// ends first.
func (l *Limiter) Turn(ctx context.Context) (func(), error) {
	return l.turns.enter(ctx, identity(ctx, ""))
}
