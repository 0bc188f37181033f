// Package resolvers implements the GraphQL resolvers: thin adapters from the schema
// to the store's domain operations.
package resolvers

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/live"
	"taskflow/ratelimit"
	"taskflow/store"
)

// Resolver is the root resolver; it holds the dependencies resolvers share.
type Resolver struct {
	DB *store.DB
	// Hasher makes and verifies password hashes under the process's bound on
	// concurrent hashes (nil: auth.DefaultHasher).
	Hasher *auth.Hasher
	// AuditKeys are the public keys that verify audit checkpoints, the one
	// that signs new ones first (AUDIT_SIGNING_KEY).
	AuditKeys []ed25519.PublicKey
	// Live serves the subscriptions; nil refuses them.
	Live *live.Hub
	// Blobs keeps the bytes of attachments; nil: attachments cannot be added
	// and have no download link (handlers built without a blob store).
	Blobs *blobs.Store
}

// errNoBlobStore answers what needs a blob store when there is none: a
// handler built without one, which a server never is.
var errNoBlobStore = errs.Errorf(errs.CodeInternal, "this server keeps no attachments")

// chargeOverrun returns the list a resolver of a list priced by its declared
// size read (User.workspaces, Workspace.members), or err: once read, the
// items past that size are charged (ratelimit.ChargeOverrun), before any of
// them is resolved, and the list is the charge's refusal when the budget
// cannot pay.
func chargeOverrun[T any](ctx context.Context, list []T, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	if err := ratelimit.ChargeOverrun(ctx, len(list)); err != nil {
		return nil, err
	}
	return list, nil
}

// auditScanPay returns what a page of auditEvents calls before it is read
// with the most events it may look at (afford), and once read with how many
// it looked at (pay), and what the resolver defers (done).
//
// afford refuses the page when the caller's budget cannot pay for looking
// at them all (ratelimit.AffordWork of ratelimit.ScanCost: 10 points for
// store.AuditScanLimit, nothing for a page its index serves), RATE_LIMITED,
// or when they take the operation over MAX_QUERY_COST, QUERY_TOO_COSTLY: so
// that a spent budget gets no scan done before its charge is refused. What
// it lets through is held against the budget until pay or done, so that
// aliases of the page each see the others' worst cases.
//
// pay charges the events looked at (ratelimit.ScanCost, a point for every
// 1,000) to the caller's budget, so that a filter that keeps few events
// pays for those it read.
func auditScanPay(ctx context.Context) (afford, pay func(n int) error, done func()) {
	h := &ratelimit.Hold{}
	const hint = "ask for fewer pages in one operation"
	afford = func(max int) error {
		release, err := ratelimit.AffordWork(ctx, ratelimit.ScanCost(int64(max)),
			fmt.Sprintf("may look at up to %d events of the log to find its page", max), hint)
		h.Keep(release)
		return err
	}
	pay = payCount(ctx, h, ratelimit.ScanCost, "looked at %d events of the log to find its page", hint)
	return afford, pay, h.Done
}

// searchPay returns what a page of searchTasks calls before it is read with
// the most tasks it may rank (afford; -1: no bound, as in every workspace
// of store.SearchCountFrom tasks or more), and once read with how many
// tasks matched its query (pay), and what the resolver defers (done).
//
// afford, with no bound, refuses the search (RATE_LIMITED) when the
// caller's budget cannot pay the first point of the ranking (a spent
// budget), since its worst case is the whole workspace's tasks, which
// nothing cheaper than the search counts; with a bound, when it cannot pay
// ranking that many (nothing, in a small workspace). What it lets through
// is held until pay or done, as auditScanPay's.
//
// pay charges ranking the matches (ratelimit.SearchCost, a point for every
// 1,000) to the caller's budget, so that a query matching most of a large
// workspace pays for the tasks it ranks.
func searchPay(ctx context.Context) (afford, pay func(n int) error, done func()) {
	h := &ratelimit.Hold{}
	const hint = "search for more specific words, or ask for fewer pages in one operation"
	afford = func(max int) error {
		points, what := ratelimit.SearchCost(int64(max)), fmt.Sprintf("may rank up to %d tasks matching the query", max)
		if max < 0 {
			points, what = ratelimit.SearchCost(ratelimit.SearchMatchesPerPoint),
				fmt.Sprintf("ranks every task matching the query, a point for every %d", ratelimit.SearchMatchesPerPoint)
		}
		release, err := ratelimit.AffordWork(ctx, points, what, hint)
		h.Keep(release)
		return err
	}
	pay = payCount(ctx, h, ratelimit.SearchCost, "ranked the %d tasks matching the query to find its page", hint)
	return afford, pay, h.Done
}

// payCount returns a function that charges price(n) points of work for the
// n things a read went through (ratelimit.ChargeWork, with what's %d
// replaced by n, and hint), once h's worst case is released; a price of 0,
// most reads, costs no message.
func payCount(ctx context.Context, h *ratelimit.Hold, price func(int64) int64, what, hint string) func(n int) error {
	return func(n int) error {
		h.Done()
		points := price(int64(n))
		if points <= 0 {
			return nil
		}
		return ratelimit.ChargeWork(ctx, points, fmt.Sprintf(what, n), hint)
	}
}

// payAuditWalk returns what verifyAuditLog calls with the seals of the chain
// before it walks them: it charges the walk (ratelimit.AuditVerifyCost, a
// point for every 100 events) to the caller's budget, so that what a
// verification reads is paid for, each alias of it too.
func payAuditWalk(ctx context.Context) func(seals int64) error {
	return func(seals int64) error {
		return ratelimit.ChargeWork(ctx, ratelimit.AuditVerifyCost(seals),
			fmt.Sprintf("walks the %d events of the chain", seals),
			"export the log (GET /audit/export, paced to your budget) and verify it offline (examples/auditverify)")
	}
}
