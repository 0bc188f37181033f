package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/errs"
	"taskflow/live"
	"taskflow/ratelimit/cost"
)

// overrunMu guards the Extra and Budget of every Outcome while its operation
// runs: the lists of one operation resolve concurrently, and the rateLimit
// field reads the Budget beside them. Only operations with a list longer than
// its price ever take it.
var overrunMu sync.Mutex

// replacedBy returns what a refused overrun of f adds to its message: for a
// deprecated list (User.workspaces, Workspace.members, replaced by their
// connections), its deprecation reason, which names the field that reads it
// a page at a time; else nothing.
func replacedBy(f *ast.Field) string {
	if f == nil || f.Definition == nil {
		return ""
	}
	d := f.Definition.Directives.ForName("deprecated")
	if d == nil {
		return ""
	}
	if r := d.Arguments.ForName("reason"); r != nil && r.Value != nil && r.Value.Raw != "" {
		return ", or read it in pages (" + f.Name + " is deprecated: " + r.Value.Raw + ")"
	}
	return ""
}

// eventKey is the context key of an event's eventCost (WithEvent).
type eventKey struct{}

// eventCost is what the lists of one event of a subscription were charged
// past their price (ChargeOverrun), guarded by overrunMu.
type eventCost struct{ extra int64 }

// WithEvent returns ctx for delivering one event of a subscription: the
// overruns its lists are charged (ChargeOverrun) add up in it with the
// event's price (cost.Event) towards MaxCost, as an operation's add up with
// its price, and not with those of the stream's other events. Without it,
// each overrun of an event is checked with the event's price alone.
func WithEvent(ctx context.Context) context.Context {
	return context.WithValue(ctx, eventKey{}, &eventCost{})
}

// ChargeOverrun charges the caller's cost budget for the items a list field
// returned past the size it was priced at (cost.Overrun), when ctx is the
// context of that field's resolver and n how many items it returned. A list
// priced by its declared size (User.workspaces, Workspace.members) can be
// longer than that size; this keeps what an operation is charged at least
// what it reads.
//
// It returns nil when nothing more is owed, when the budget paid (the
// operation's Outcome then reports it in Extra and Budget), or when no
// limiter checked the operation. Otherwise, and then nothing is taken, it
// returns the error the field must answer instead of its items:
// QUERY_TOO_COSTLY (with cost and maximum) when the operation's cost with the
// overrun is more than MaxCost (for a subscription: the cost of one event,
// its price and its overruns, WithEvent), RATE_LIMITED (with retryAfter) when the budget cannot pay now. The
// QUERY_TOO_COSTLY of a deprecated list quotes its deprecation reason, which
// names the connection that reads it a page at a time.
func ChargeOverrun(ctx context.Context, n int) error {
	if !graphql.HasOperationContext(ctx) {
		return nil
	}
	fc := graphql.GetFieldContext(ctx)
	rc := graphql.GetOperationContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil
	}
	points := cost.Overrun(fc.Field.Field, rc.Variables, n)
	return charge(ctx, fc, rc, points,
		func(total, maximum int64) string {
			return fmt.Sprintf("%s returned %d items, more than it was priced at: with them the operation costs %d, more than the maximum of %d; ask for less in each item%s",
				fc.Field.Name, n, total, maximum, replacedBy(fc.Field.Field))
		},
		func(points int64) string {
			return fmt.Sprintf("%s returned %d items, more than it was priced at: they cost %d more points, which your query-cost budget cannot pay now; retry after retryAfter seconds",
				fc.Field.Name, n, points)
		})
}

// AuditVerifyEventsPerPoint is how many events of a chain verifyAuditLog
// walks for one point (ChargeWork), on top of its price: a walk reads and
// hashes every event, about 12 µs each.
const AuditVerifyEventsPerPoint = 100

// AuditVerifyCost is what walking a chain of events events costs on top of
// the field's price: a point for every AuditVerifyEventsPerPoint, rounded up.
func AuditVerifyCost(events int64) int64 {
	if events <= 0 {
		return 0
	}
	return (events-1)/AuditVerifyEventsPerPoint + 1
}

// ScanEventsPerPoint is how many events of the audit log a page of
// auditEvents, or a subscription's catch-up, looks at for one point, on top
// of its price: a scan that keeps few of the events it reads is paid for
// what it reads, not for what it keeps (about 0.13 µs an event in Postgres,
// docs/decisions/2026-12-04-event-scans.md).
const ScanEventsPerPoint = 1000

// ScanCost is what looking at events events of the audit log costs on top
// of a price: a point for every whole ScanEventsPerPoint (fewer cost
// nothing, so ordinary pages and catch-ups cost what they are priced).
func ScanCost(events int64) int64 {
	if events <= 0 {
		return 0
	}
	return events / ScanEventsPerPoint
}

// CatchUpScanCost is the worst case of one catch-up read of a subscription
// (ScanCost of live.CatchUpScan events, 10 points): every subscription makes
// one when it starts, so a subscription whose price with it is more than
// MAX_QUERY_COST is refused before it is charged.
const CatchUpScanCost = live.CatchUpScan / ScanEventsPerPoint

// SearchMatchesPerPoint is how many matching tasks a page of searchTasks
// ranks for one point, on top of its price: a page ranks every match of its
// query to find its own (about 0.6 µs a match in Postgres,
// docs/decisions/2026-12-04-search-matches.md).
const SearchMatchesPerPoint = 1000

// SearchCost is what ranking matches tasks costs a page of searchTasks on
// top of its price: a point for every whole SearchMatchesPerPoint (fewer
// cost nothing, so ordinary searches cost what they are priced).
func SearchCost(matches int64) int64 {
	if matches <= 0 {
		return 0
	}
	return matches / SearchMatchesPerPoint
}

// ChargeWork charges the caller's cost budget points more for work the field
// whose resolver has ctx is about to do, which its price could not know
// (what it reads depends on the data: verifyAuditLog walks the whole chain).
// It is ChargeOverrun's charge: nil when paid (or when no limiter checked the
// operation); QUERY_TOO_COSTLY when the operation's cost with points is more
// than MaxCost, RATE_LIMITED when the budget cannot pay now, and then nothing
// is taken and the field must not do the work. what says what the points pay
// for, and hint what to do instead when the work is too costly.
func ChargeWork(ctx context.Context, points int64, what, hint string) error {
	fc, rc := fieldOf(ctx, points)
	if fc == nil {
		return nil
	}
	return charge(ctx, fc, rc, points,
		func(total, maximum int64) string {
			return fmt.Sprintf("%s %s: %d points more, with which the operation costs %d, more than the maximum of %d; %s",
				fc.Field.Name, what, points, total, maximum, hint)
		},
		func(points int64) string {
			return fmt.Sprintf("%s %s: %d points more, which your query-cost budget cannot pay now; retry after retryAfter seconds",
				fc.Field.Name, what, points)
		})
}

// AffordWork is what a field whose resolver has ctx calls before work that
// may cost up to points more (ChargeWork's, once it knows what it did). It
// returns nil when the work may run (also when no limiter checked the
// operation, or points is 0 or less), and nothing is taken: the budget is
// charged what the work did, not its worst case. But the worst case is held
// until release is called (once the work is charged, before ChargeWork, or
// failed): against MaxCost in the operation, and against the caller's
// budget on this instance, so that fields resolving at once (aliases) and
// the caller's other work each see what the others were let through. Else,
// and then nothing is held, it returns the error the field must answer
// without doing the work: QUERY_TOO_COSTLY (with cost and maximum) when the
// operation's cost with its worst cases in flight and points is more than
// MaxCost, as ChargeWork's for what it did; RATE_LIMITED (with retryAfter)
// when the budget cannot pay points now on top of what is held against it.
// what says what the work is, and hint what to do instead when it is too
// costly. release is never nil, and may be called more than once; a budget
// spent meanwhile by another instance still refuses the charge after.
func AffordWork(ctx context.Context, points int64, what, hint string) (release func(), err error) {
	fc, rc := fieldOf(ctx, points)
	if fc == nil {
		return noRelease, nil
	}
	o := OutcomeOf(ctx, rc)
	if o == nil || o.l == nil {
		return noRelease, nil
	}
	l := o.l
	// A subscription's events are each their own execution and hold
	// nothing in it, as charge keeps nothing.
	perEvent := rc.Operation != nil && rc.Operation.Operation == ast.Subscription
	if !perEvent {
		overrunMu.Lock()
		total := cost.Add(cost.Add(cost.Add(o.Cost, o.Extra), o.held), points)
		if total > l.MaxCost() {
			overrunMu.Unlock()
			l.metrics.operations.WithLabelValues(LimitCost, "too_costly").Inc()
			return noRelease, &errs.Error{Code: errs.CodeQueryTooCostly,
				Message: fmt.Sprintf("%s %s: up to %d points more, with which the operation may cost %d, more than the maximum of %d; %s",
					fc.Field.Name, what, points, total, l.MaxCost(), hint),
				Extensions: map[string]any{"cost": total, "maximum": l.MaxCost()}}
		}
		o.held += points
		overrunMu.Unlock()
	}
	unhold := func() {
		if !perEvent {
			overrunMu.Lock()
			o.held -= points
			overrunMu.Unlock()
		}
	}
	releaseBudget, refused := l.reserve(ctx, costKey(ctx), points, fmt.Sprintf(
		"%s %s: up to %d points more, which your query-cost budget cannot pay now; retry after retryAfter seconds",
		fc.Field.Name, what, points))
	if refused != nil {
		unhold()
		return noRelease, refused
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			releaseBudget()
			unhold()
		})
	}, nil
}

// fieldOf returns the context of the field whose resolver has ctx and of
// its operation, or nil when there is nothing to charge points for (no
// points, or no operation's field).
func fieldOf(ctx context.Context, points int64) (*graphql.FieldContext, *graphql.OperationContext) {
	if points <= 0 || !graphql.HasOperationContext(ctx) {
		return nil, nil
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, nil
	}
	return fc, graphql.GetOperationContext(ctx)
}

// charge charges points for the field of fc in the operation rc (see
// ChargeOverrun); tooCostly and limited write the messages of its refusals.
func charge(ctx context.Context, fc *graphql.FieldContext, rc *graphql.OperationContext, points int64,
	tooCostly func(total, maximum int64) string, limited func(points int64) string,
) error {
	if points <= 0 {
		return nil
	}
	o := OutcomeOf(ctx, rc)
	if o == nil || o.l == nil {
		return nil
	}
	l := o.l
	// The overrun is reserved in extra (the operation's Extra) before the
	// budget is asked, so that lists resolving at once cannot each pass the
	// MaxCost check. A subscription's events are each their own execution,
	// priced cost.Event: an event's overruns add up in its eventCost
	// (WithEvent), with its price, and not in the operation's Outcome.
	perEvent := rc.Operation != nil && rc.Operation.Operation == ast.Subscription
	base, extra := o.Cost, &o.Extra
	if perEvent {
		base, extra = cost.Event(rc.Operation, rc.Variables), new(int64)
		if ev, ok := ctx.Value(eventKey{}).(*eventCost); ok {
			extra = &ev.extra
		}
	}
	overrunMu.Lock()
	total := cost.Add(cost.Add(base, *extra), points)
	if total > l.MaxCost() {
		overrunMu.Unlock()
		l.metrics.operations.WithLabelValues(LimitCost, "too_costly").Inc()
		return &errs.Error{Code: errs.CodeQueryTooCostly,
			Message:    tooCostly(total, l.MaxCost()),
			Extensions: map[string]any{"cost": total, "maximum": l.MaxCost()}}
	}
	*extra += points
	overrunMu.Unlock()

	res := l.allow(ctx, LimitCost, costKey(ctx), l.costLimit(), int(points))
	now := time.Now()
	overrunMu.Lock()
	defer overrunMu.Unlock()
	if !res.Allowed {
		*extra -= points
		return l.refused(limited(points), res.RetryAfter)
	}
	if !perEvent && now.After(o.at) {
		o.Budget, o.at = res, now
	}
	return nil
}

// Hold keeps the release of the last check a read's worst case passed
// (Reserve, AffordWork, AffordScan) until the read is charged what it did
// or ends: Keep it after each check, call Done before the charge and when
// the read ends (a deferred call). It is safe for concurrent use (a
// stream's end may come from another goroutine than its reads); the zero
// Hold holds nothing.
type Hold struct {
	mu      sync.Mutex
	release func()
}

// Keep holds release, the release of a check.
func (h *Hold) Keep(release func()) {
	h.mu.Lock()
	h.release = release
	h.mu.Unlock()
}

// Done releases what is held, once.
func (h *Hold) Done() {
	h.mu.Lock()
	r := h.release
	h.release = nil
	h.mu.Unlock()
	if r != nil {
		r()
	}
}
