// Package cpumeter adds up, per request, the time spent in the CPU-bound work
// that a client's input can make large: decoding its body, parsing and
// validating its document, hashing its password, executing a heavy document.
// The rate limiter paces each caller's turns by it (ratelimit.Limiter.Turn),
// so that a caller is charged for the work it asked for and never for time
// the server spent waiting on its network, Postgres or Redis. It measures
// wall time around sections that do not wait: Go has no per-goroutine CPU
// clock. It is a leaf package: it imports only the standard library.
package cpumeter

import (
	"context"
	"sync/atomic"
	"time"
)

// Meter is the time one request spent in metered work. It is safe for
// concurrent use.
type Meter struct{ ns atomic.Int64 }

type key struct{}

// With returns ctx carrying a new Meter, and the Meter.
func With(ctx context.Context) (context.Context, *Meter) {
	m := &Meter{}
	return Into(ctx, m), m
}

// Into returns ctx carrying m, a Meter of With: work done under another
// context than the one m was made for (an operation a WebSocket connection
// prepared under one context and executes under another) is added to it.
func Into(ctx context.Context, m *Meter) context.Context {
	return context.WithValue(ctx, key{}, m)
}

// Add adds d to the Meter of ctx, if it has one.
func Add(ctx context.Context, d time.Duration) {
	if m, _ := ctx.Value(key{}).(*Meter); m != nil && d > 0 {
		m.ns.Add(int64(d))
	}
}

// Start starts timing a section of metered work for the Meter of ctx and
// returns the function that ends it: defer cpumeter.Start(ctx)().
func Start(ctx context.Context) func() {
	m, _ := ctx.Value(key{}).(*Meter)
	if m == nil {
		return func() {}
	}
	start := time.Now()
	return func() { m.ns.Add(int64(time.Since(start))) }
}

// Spent returns the time metered so far.
func (m *Meter) Spent() time.Duration { return time.Duration(m.ns.Load()) }
