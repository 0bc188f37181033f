package live

import (
	"context"
	"sync"

	"taskflow/errs"
)

// End holds why a stream ended, for the transport to tell the client after
// the last event.
type End struct {
	mu  sync.Mutex
	err *errs.Error
}

// Err returns why the stream ended, or nil when it has not ended with an
// error (it is still open, or the client went away).
func (e *End) Err() *errs.Error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

type endKey struct{}

// WithEnd returns ctx with a holder for why the subscription that runs in it
// ends, and the holder.
func WithEnd(ctx context.Context) (context.Context, *End) {
	e := &End{}
	return context.WithValue(ctx, endKey{}, e), e
}

// endStream records err in the holder of ctx, if it has one; the first
// error wins.
func endStream(ctx context.Context, err *errs.Error) {
	if e, _ := ctx.Value(endKey{}).(*End); e != nil {
		e.mu.Lock()
		if e.err == nil {
			e.err = err
		}
		e.mu.Unlock()
	}
}

// Charge takes the price of one delivered event from the caller's budget,
// or returns the RATE_LIMITED error that ends the stream.
type Charge func(ctx context.Context) *errs.Error

type chargeKey struct{}

// WithCharge returns ctx whose subscriptions pay each delivered event with
// fn (the transport's rate limiter).
func WithCharge(ctx context.Context, fn Charge) context.Context {
	return context.WithValue(ctx, chargeKey{}, fn)
}

// charge pays for one event with the Charge of ctx; free without one.
func charge(ctx context.Context) *errs.Error {
	if fn, _ := ctx.Value(chargeKey{}).(Charge); fn != nil {
		return fn(ctx)
	}
	return nil
}

// ScanCharge takes the price of a catch-up read that looked at events
// events of the spine from the caller's budget (nothing for few), or
// returns the RATE_LIMITED error that ends the stream.
type ScanCharge func(ctx context.Context, events int) *errs.Error

// ScanPay is how a subscription pays for its catch-up reads.
type ScanPay struct {
	// Afford is called before each read with the most events it may look
	// at (CatchUpScan): it returns the RATE_LIMITED error that ends the
	// stream, before the read, when the caller's budget cannot pay for
	// that many now, and takes nothing. Nil: every read may run.
	Afford ScanCharge
	// Charge is called after each read with the events it looked at, and
	// takes their price (nil: reads are free).
	Charge ScanCharge
}

type scanPayKey struct{}

// WithScanPay returns ctx whose subscriptions pay each catch-up read with p
// (the transport's rate limiter).
func WithScanPay(ctx context.Context, p ScanPay) context.Context {
	return context.WithValue(ctx, scanPayKey{}, p)
}

// payScan calls the ScanPay of ctx that pick chooses with events (nothing
// for none, or without one).
func payScan(ctx context.Context, pick func(ScanPay) ScanCharge, events int) *errs.Error {
	p, _ := ctx.Value(scanPayKey{}).(ScanPay)
	if fn := pick(p); fn != nil && events > 0 {
		return fn(ctx, events)
	}
	return nil
}

// affordScan asks whether the caller's budget can pay a catch-up read that
// may look at up to events events (ScanPay.Afford).
func affordScan(ctx context.Context, events int) *errs.Error {
	return payScan(ctx, func(p ScanPay) ScanCharge { return p.Afford }, events)
}

// chargeScan pays for a catch-up read that looked at events events
// (ScanPay.Charge).
func chargeScan(ctx context.Context, events int) *errs.Error {
	return payScan(ctx, func(p ScanPay) ScanCharge { return p.Charge }, events)
}
