package ratelimit

import (
	"context"
	"time"
)

// LimitPersistedQueryIP is the limit of the persisted-query texts a client
// network has stored (Config.PersistedQueryKiBPerIP).
const LimitPersistedQueryIP = "apq_ip"

// PersistedQueryPointBytes is what one point of Config.PersistedQueryKiBPerIP
// stores: a text is charged its length in KiB, rounded up.
const PersistedQueryPointBytes = 1 << 10

// DefaultPersistedQueryKiBPerIP is the default of
// Config.PersistedQueryKiBPerIP: 1 MiB of persisted-query texts stored an
// hour per client network, refilled continuously. A text is stored once for
// every client (instances share it through Redis), so a whole application's
// queries (a few hundred texts of a few KB) take a fraction of it; a client
// registering 64 KiB texts that cost nothing to run (a comment and
// { __typename }) stored one each time it could send a request, and kept
// each 24 hours.
var DefaultPersistedQueryKiBPerIP = Limit{Points: 1024, Window: time.Hour}

// AllowPersistedQuery charges the client network of ctx for storing a
// persisted-query text of n bytes (one point of
// Config.PersistedQueryKiBPerIP per KiB, rounded up) and reports whether it
// may be stored; past the limit nothing is charged and the text is not
// stored (the operation runs anyway: its client sends the text again on its
// next miss, as the protocol expects). A text package apq does not store
// because it writes a secret inline is never charged.
func (l *Limiter) AllowPersistedQuery(ctx context.Context, n int) bool {
	points := max((n+PersistedQueryPointBytes-1)/PersistedQueryPointBytes, 1)
	res := l.AllowN(ctx, LimitPersistedQueryIP, networkKey(ctx), l.cfg.PersistedQueryKiBPerIP, points)
	outcome := "allowed"
	if !res.Allowed {
		outcome = "limited"
	}
	l.metrics.operations.WithLabelValues(LimitPersistedQueryIP, outcome).Inc()
	return res.Allowed
}
