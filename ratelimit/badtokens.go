package ratelimit

import (
	"context"
	"sync"
	"time"

	"taskflow/auth"
	"taskflow/reqinfo"
)

// LimitBadTokenIP is the limit of the bearer tokens a client network sends
// that turn out not to be valid (Config.BadTokenPerIP).
const LimitBadTokenIP = "bad_token_ip"

// DefaultBadTokenPerIP is the default of Config.BadTokenPerIP: 30 invalid
// bearer tokens a minute per client network, refilled continuously (one
// every 2 s). A client that signs in again after its token expired sends one;
// an office behind one NAT whose tokens all expire at once sends one each,
// once, and valid tokens are never charged.
var DefaultBadTokenPerIP = Limit{Points: 30, Window: time.Minute}

// maxBlocked bounds the client networks an instance remembers as refused
// for invalid tokens (about 1 MB).
const maxBlocked = 10000

// TokenGuard bounds, per client network, the bearer tokens that turn out not
// to be valid: it implements auth.Guard for the Limiter that made it
// (Limiter.TokenGuard). Each invalid token is charged one point of
// Config.BadTokenPerIP, in Redis when it is healthy; a network refused is
// remembered by the instance until its retry time, and its lookups are
// refused meanwhile without a round trip to Postgres or Redis.
type TokenGuard struct{ l *Limiter }

var _ auth.Guard = TokenGuard{}

// TokenGuard returns the guard of invalid bearer tokens of l.
func (l *Limiter) TokenGuard() TokenGuard { return TokenGuard{l} }

// Blocked reports whether the client network of ctx is refused, and for how
// long, from this instance's memory alone.
func (g TokenGuard) Blocked(ctx context.Context) (time.Duration, bool) {
	retry, ok := g.l.blocked.get(ClientNetwork(reqinfo.From(ctx).IP), time.Now())
	if ok {
		g.l.metrics.operations.WithLabelValues(LimitBadTokenIP, "limited").Inc()
	}
	return retry, ok
}

// Failed charges the client network of ctx one point of Config.BadTokenPerIP
// and reports whether the charge was refused, and for how long; a refused
// network is remembered as blocked until then.
func (g TokenGuard) Failed(ctx context.Context) (time.Duration, bool) {
	network := ClientNetwork(reqinfo.From(ctx).IP)
	res := g.l.AllowN(ctx, LimitBadTokenIP, "ip:"+network, g.l.cfg.BadTokenPerIP, 1)
	if res.Allowed {
		g.l.metrics.operations.WithLabelValues(LimitBadTokenIP, "allowed").Inc()
		return 0, false
	}
	g.l.metrics.operations.WithLabelValues(LimitBadTokenIP, "limited").Inc()
	g.l.blocked.add(network, time.Now().Add(res.RetryAfter))
	return res.RetryAfter, true
}

// blockList is the client networks an instance refuses until a time, at
// most max of them: when full, the expired are dropped, and if none is, the
// one refused for the least time is.
type blockList struct {
	mu    sync.Mutex
	until map[string]time.Time
	max   int
}

// newBlockList returns an empty blockList of at most max networks.
func newBlockList(max int) *blockList {
	return &blockList{until: map[string]time.Time{}, max: max}
}

// get returns how long network is still refused at now, if it is.
func (b *blockList) get(network string, now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.until[network]
	if !ok {
		return 0, false
	}
	if !now.Before(until) {
		delete(b.until, network)
		return 0, false
	}
	return until.Sub(now), true
}

// add refuses network until the time given.
func (b *blockList) add(network string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.until[network]; !ok && len(b.until) >= b.max {
		now := time.Now()
		var first string
		found := false
		for n, u := range b.until {
			if !now.Before(u) {
				delete(b.until, n)
			} else if !found || u.Before(b.until[first]) {
				first, found = n, true
			}
		}
		if len(b.until) >= b.max {
			delete(b.until, first)
		}
	}
	b.until[network] = until
}

// len returns how many networks b holds.
func (b *blockList) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.until)
}
