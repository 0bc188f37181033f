package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/auth"
	"taskflow/cpumeter"
	"taskflow/errs"
	"taskflow/ratelimit/cost"
	"taskflow/reqinfo"
	"taskflow/store"
)

// statsKey is where the Outcome of an operation is kept in its OperationContext.
const statsKey = "taskflow.ratelimit"

// Outcome is what the rate limiter decided about one operation; the transport
// turns it into headers and extensions.cost, the rateLimit field reports it.
type Outcome struct {
	// Cost is the operation's calculated cost (0 when it was never costed).
	Cost int64
	// Policy is the cost budget.
	Policy Limit
	// Budget is the cost budget after this operation (charged only if allowed).
	Budget Result
	// Limited names the limit that refused the operation ("" when none did).
	Limited string
	// RetryAfter is how long until the refused operation would be allowed.
	RetryAfter time.Duration
	// Extra is what the operation was charged while it ran, past Cost: the
	// items of lists longer than they were priced at (ChargeOverrun). It is
	// written under overrunMu while the operation runs; read it once the
	// operation has finished.
	Extra int64
	// held is the worst cases of the work its fields were let through and
	// have not charged yet (AffordWork), under overrunMu: they count
	// against MaxCost with Extra.
	held int64
	// at is when Budget was read.
	at time.Time
	// policy is the RateLimit-Policy header of Policy.
	policy string
	// l charges the operation's overruns (nil: not an operation's Outcome).
	l *Limiter
}

// PolicyHeader is the value of the RateLimit-Policy header of the cost budget:
// "cost";q=<points>;w=<window in whole seconds, rounded up>.
func (o *Outcome) PolicyHeader() string {
	if o.policy == "" {
		return policyHeader(o.Policy)
	}
	return o.policy
}

func policyHeader(l Limit) string {
	return `"cost";q=` + strconv.Itoa(l.Points) + `;w=` + strconv.FormatInt(int64(math.Ceil(l.Window.Seconds())), 10)
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1.
func (o *Outcome) RetryAfterSeconds() int { return ceilSeconds(o.RetryAfter) }

// ResetSeconds is the time until the cost budget is full again, in whole
// seconds rounded up (0 when it is full).
func (o *Outcome) ResetSeconds() int {
	if o.Budget.ResetAfter <= 0 {
		return 0
	}
	return int(math.Ceil(o.Budget.ResetAfter.Seconds()))
}

func ceilSeconds(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds())), 1)
}

// slotKey is the context key of the room WithOutcome makes.
type slotKey struct{}

// slot holds the Outcome of the one operation of a request (set once the
// limiter has seen it).
type slot struct {
	o   Outcome
	set bool
}

// WithOutcome returns ctx with room for the Outcome of the one operation that
// will run in it. A transport that serves one operation per request gives it
// to CreateOperationContext, and the limiter records its decision there
// instead of in the operation's stats (which costs a map per operation).
func WithOutcome(ctx context.Context) context.Context {
	return context.WithValue(ctx, slotKey{}, &slot{})
}

// OutcomeOf returns the Outcome recorded for the operation rc running in ctx
// (see WithOutcome), or nil when the limiter did not see it (it failed to
// parse or validate). rc may be nil.
func OutcomeOf(ctx context.Context, rc *graphql.OperationContext) *Outcome {
	if s, _ := ctx.Value(slotKey{}).(*slot); s != nil && s.set {
		return &s.o
	}
	if rc == nil {
		return nil
	}
	o, _ := rc.Stats.GetExtension(statsKey).(*Outcome)
	return o
}

// newOutcome returns the Outcome of the operation rc running in ctx, o, kept
// where OutcomeOf finds it: in the room WithOutcome made, or in rc's stats.
func newOutcome(ctx context.Context, rc *graphql.OperationContext, o Outcome) *Outcome {
	if s, _ := ctx.Value(slotKey{}).(*slot); s != nil {
		s.o, s.set = o, true
		return &s.o
	}
	p := &o
	rc.Stats.SetExtension(statsKey, p)
	return p
}

// Budget is the GraphQL RateLimitStatus: the caller's cost budget after the
// current operation, and what the operation cost.
type Budget struct {
	Limit     int
	Remaining int
	ResetAt   time.Time
	Cost      int
}

// BudgetFrom returns the Budget of the operation running in ctx; it returns an
// INTERNAL error when the limiter did not check the operation.
func BudgetFrom(ctx context.Context) (*Budget, error) {
	if !graphql.HasOperationContext(ctx) {
		return nil, fmt.Errorf("ratelimit: no operation context")
	}
	o := OutcomeOf(ctx, graphql.GetOperationContext(ctx))
	if o == nil {
		return nil, fmt.Errorf("ratelimit: the operation was not checked by the rate limiter")
	}
	overrunMu.Lock() // a list beside this field may be charging its overrun
	defer overrunMu.Unlock()
	return &Budget{
		Limit:     o.Policy.Points,
		Remaining: o.Budget.Remaining,
		ResetAt:   o.at.Add(o.Budget.ResetAfter).UTC(),
		Cost:      int(min(o.Cost, math.MaxInt32)),
	}, nil
}

// identity is prefix followed by the budget key of the caller: the user, or
// the client IP (one allocation, for the cost budget's full key too).
func identity(ctx context.Context, prefix string) string {
	if u := auth.UserFrom(ctx); u != nil {
		return userIdentity(prefix, u.ID)
	}
	return prefix + "ip:" + ClientNetwork(reqinfo.From(ctx).IP)
}

// networkKey is the key of the client network of ctx in a limit counted
// by network whoever the caller is (login, register, stored persisted
// queries): "ip:" and ClientNetwork of the client IP.
func networkKey(ctx context.Context) string { return "ip:" + ClientNetwork(reqinfo.From(ctx).IP) }

// ClientNetwork is what the limits count an anonymous caller at ip by (and
// what the HTTP API counts each client's open streams by): an IPv4 address
// (also written as ::ffff:a.b.c.d) as it is, an IPv6 address by its /64
// network. A /64 is the smallest network one subscriber is given
// (RFC 6177), and a host picks its addresses in it at will (RFC 8981's
// temporary addresses; any host can use millions): counted by address, one
// IPv6 client would have as many budgets, login and register limits, turns
// and streams as it liked. Something that is no address is counted as it is.
func ClientNetwork(ip string) string {
	if !strings.Contains(ip, ":") {
		return ip // IPv4: no parsing on the usual path
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	if a = a.WithZone("").Unmap(); a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// costKey is the full key of the caller's cost budget (LimitCost + ":" +
// identity).
func costKey(ctx context.Context) string { return identity(ctx, LimitCost+":") }

// userIdentity is identity of a request of the user userID.
func userIdentity(prefix, userID string) string { return prefix + "u:" + userID }

// userCostKey is the full key of the cost budget of the user userID: costKey
// of a request of that user.
func userCostKey(userID string) string { return userIdentity(LimitCost+":", userID) }

// Peek reads the caller's cost budget without charging it, for responses to
// operations the limiter never saw (parse or validation errors).
func (l *Limiter) Peek(ctx context.Context) *Outcome {
	pol := l.costLimit()
	return &Outcome{Policy: pol, policy: l.policyHeader, Budget: l.allow(ctx, LimitCost, costKey(ctx), pol, 0), at: time.Now()}
}

func (l *Limiter) costLimit() Limit { return Limit{Points: l.cfg.Points, Window: l.cfg.Window} }

// ChargeEvent takes points from the caller's cost budget for one event
// delivered to a subscription (cost.Event), or returns the RATE_LIMITED
// error, with retryAfter, that ends the stream (nothing is taken then).
func (l *Limiter) ChargeEvent(ctx context.Context, points int64) *errs.Error {
	return l.chargeStream(ctx, points, "your query-cost budget cannot pay for the next event: subscribe again with the last cursor after retryAfter seconds")
}

// ChargeScan takes points from the caller's cost budget for a catch-up read
// of a subscription (ScanCost of the events it looked at), as ChargeEvent
// does for an event: nil when paid (or points is 0), else the RATE_LIMITED
// error that ends the stream, and nothing is taken.
func (l *Limiter) ChargeScan(ctx context.Context, points int64) *errs.Error {
	return l.chargeStream(ctx, points, fmt.Sprintf("your query-cost budget cannot pay for the %d points of reading the log from your cursor: "+
		"subscribe again with the last cursor after retryAfter seconds", points))
}

// AffordScan is what a subscription calls before a catch-up read that may
// look at events worth up to points (ScanCost of its bound, at most
// CatchUpScanCost: a subscription whose price leaves no room for it under
// MaxCost was refused when it subscribed), as AffordWork is for a field: nil
// when the caller's cost budget can pay points now on top of what this
// instance holds against it already (or points is 0 or less), and nothing
// is taken, but points are held against the budget until release is called
// (once the read is charged what it looked at, ChargeScan, or failed); else
// the RATE_LIMITED error, with retryAfter, that ends the stream before the
// read, and nothing is held. release is never nil, and may be called more
// than once.
func (l *Limiter) AffordScan(ctx context.Context, points int64) (release func(), err *errs.Error) {
	if points <= 0 {
		return noRelease, nil
	}
	return l.reserve(ctx, costKey(ctx), points, fmt.Sprintf("your query-cost budget cannot pay the up to %d points of reading the log from your cursor: "+
		"subscribe again with the last cursor after retryAfter seconds", points))
}

// chargeStream takes points (nothing when 0 or less) from the caller's cost
// budget for a subscription's work: nil when paid, else the RATE_LIMITED
// error with message and retryAfter that ends the stream, and nothing is
// taken.
func (l *Limiter) chargeStream(ctx context.Context, points int64, message string) *errs.Error {
	if points <= 0 {
		return nil
	}
	res := l.allow(ctx, LimitCost, costKey(ctx), l.costLimit(), int(min(points, math.MaxInt32)))
	if res.Allowed {
		return nil
	}
	return l.refused(message, res.RetryAfter)
}

// refused counts a refusal of the cost budget and returns its RATE_LIMITED
// error, with message and retryAfter (retry rounded up to whole seconds).
func (l *Limiter) refused(message string, retry time.Duration) *errs.Error {
	l.metrics.operations.WithLabelValues(LimitCost, "limited").Inc()
	return &errs.Error{Code: errs.CodeRateLimited, Message: message,
		Extensions: map[string]any{"retryAfter": ceilSeconds(retry)}}
}

// canPay reads the cost budget full (a full key, as costKey's) without
// charging it and returns it with Allowed saying whether it can pay points
// now on top of held, what this instance holds against it for work let
// through and not yet charged (reserve); points over the whole budget count
// as the whole budget, as Charge takes them, and when it cannot pay,
// RetryAfter until it could (a whole budget at most).
func (l *Limiter) canPay(ctx context.Context, full string, held, points int64) Result {
	pol := l.costLimit()
	n := max(held, 0) + min(max(points, 0), int64(pol.Points))
	res := l.allow(ctx, LimitCost, full, pol, 0)
	res.Allowed = int64(res.Remaining) >= n
	if !res.Allowed {
		res.RetryAfter = max(exact(res.ResetAfter+time.Duration(min(n, int64(pol.Points)))*pol.emission()-pol.Window), resolution)
	}
	return res
}

// holds is what the checks of work let through on this instance and not yet
// released, by the full key of the budget that will pay it (reserve): the
// fields of one operation resolve at once, and the operations, streams and
// exports of one caller run at once, each asking the budget before its
// work; what one was let through must count against the next, or all pass
// a check only one of them can pay.
type holds struct {
	mu sync.Mutex
	m  map[string]int64
}

// add holds points more against full and returns what was held before.
func (h *holds) add(full string, points int64) (before int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]int64{}
	}
	before = h.m[full]
	h.m[full] = before + points
	return before
}

// remove releases points held against full.
func (h *holds) remove(full string, points int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.m[full] - points; n > 0 {
		h.m[full] = n
	} else {
		delete(h.m, full)
	}
}

// held is what is held against full.
func (h *holds) held(full string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[full]
}

// noRelease is the release of a check that held nothing.
func noRelease() {}

// reserve is the check of AffordWork and AffordScan: when the budget full
// can pay points on top of what this instance holds against it already, it
// holds them too until release is called (once; later calls do nothing);
// else it holds nothing and returns the refusal with message (counted).
func (l *Limiter) reserve(ctx context.Context, full string, points int64, message string) (release func(), err *errs.Error) {
	res, release := l.hold(ctx, full, points, points)
	if !res.Allowed {
		return noRelease, l.refused(message, res.RetryAfter)
	}
	return release, nil
}

// hold is reserve's and Reserve's check that the budget full can pay need
// on top of what is held against it: it holds keep (need, or the part of
// it charged later) and returns the budget read and the release of what it
// holds (Allowed false: refused, nothing held, release does nothing).
func (l *Limiter) hold(ctx context.Context, full string, need, keep int64) (Result, func()) {
	keep = min(max(keep, 0), int64(l.cfg.Points)) // as canPay counts need
	before := l.holds.add(full, keep)
	res := l.canPay(ctx, full, before, need)
	if !res.Allowed {
		l.holds.remove(full, keep)
		return res, noRelease
	}
	var once sync.Once
	return res, func() { once.Do(func() { l.holds.remove(full, keep) }) }
}

// Charge takes points from the cost budget of the user userID for a request
// served outside GraphQL operations (a download, an audit export: package
// httpapi), the budget the user's operations are charged to, through the same
// backends, leases and fail-open policy. A charge over the whole budget takes
// the whole budget, so that a full budget can always pay. It returns the
// Outcome: the budget after the charge; when the budget cannot pay, nothing is
// taken, Limited (LimitCost) and RetryAfter say until when, and the refusal
// counts in taskflow_ratelimit_operations_total{limit="cost",outcome="limited"}.
// Points of 0 or less read the budget without charging it.
func (l *Limiter) Charge(ctx context.Context, userID string, points int64) *Outcome {
	pol := l.costLimit()
	n := int(min(max(points, 0), int64(pol.Points)))
	return l.outcome(int64(n), l.allow(ctx, LimitCost, userCostKey(userID), pol, n))
}

// Afford reads the cost budget of the user userID, as Charge would charge
// it, without charging it: the Outcome says whether the budget can pay
// points now, on top of what this instance holds against it (Reserve,
// AffordWork, AffordScan), with Limited and RetryAfter set, and the refusal
// counted, as Charge's, when it cannot.
func (l *Limiter) Afford(ctx context.Context, userID string, points int64) *Outcome {
	full := userCostKey(userID)
	return l.outcome(0, l.canPay(ctx, full, l.holds.held(full), points))
}

// Reserve is Afford for a request outside GraphQL operations about to do
// work that may cost up to need, of which later (at most need) is charged
// once the work is done (Charge; the rest at once, by the caller): when the
// budget can pay need, later is also held against it on this instance
// until release is called (once the work is charged or failed; later calls
// do nothing), so that the user's other work asking meanwhile sees the
// budget without it. When it cannot, nothing is held (release does
// nothing). release is never nil.
func (l *Limiter) Reserve(ctx context.Context, userID string, need, later int64) (o *Outcome, release func()) {
	res, release := l.hold(ctx, userCostKey(userID), need, min(later, need))
	return l.outcome(0, res), release
}

// outcome is the Outcome of a charge of cost points that the budget
// answered with res, with a refusal recorded and counted.
func (l *Limiter) outcome(cost int64, res Result) *Outcome {
	o := &Outcome{Cost: cost, Policy: l.costLimit(), policy: l.policyHeader, Budget: res, at: time.Now()}
	if !res.Allowed {
		o.Limited, o.RetryAfter = LimitCost, res.RetryAfter
		l.metrics.operations.WithLabelValues(LimitCost, "limited").Inc()
	}
	return o
}

// DownloadPointBytes is what one point of the cost budget buys of a file
// served (GET /attachments/{id}): 64 KiB, the price of uploading it.
const DownloadPointBytes = UploadPointBytes

// DownloadCost is the points serving n bytes of a file costs: one per
// DownloadPointBytes rounded up, at least 1 (a request that sends nothing,
// HEAD or 304, costs 1 too).
func DownloadCost(n int64) int64 { return max(UploadCost(n), 1) }

// MaxCost is the most one operation may cost: MAX_QUERY_COST, or the whole
// budget when that is smaller (an operation that can never fit is not a 429).
func (l *Limiter) MaxCost() int64 { return int64(min(l.cfg.MaxCost, l.cfg.Points)) }

// UploadPointBytes is what one point of the cost budget buys of the files of
// a multipart request: 64 KiB. A 25 MiB upload costs 400 points, so the
// default budget (1000 a minute) lets one user upload about 60 MiB a minute.
const UploadPointBytes = 64 << 10

// uploadBytesKey is the context key of the bytes of files of a request.
type uploadBytesKey struct{}

// WithUploadBytes returns ctx saying that the operation about to be checked
// comes with n bytes of files (a multipart request's, counted before they are
// read: its Content-Length). They are charged to the cost budget with the
// operation, at one point per UploadPointBytes rounded up (UploadCost), and
// do not count towards MAX_QUERY_COST; an operation whose cost with its files
// is more than the whole budget is QUERY_TOO_COSTLY.
func WithUploadBytes(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, uploadBytesKey{}, n)
}

// UploadCost is the points n bytes of files cost.
func UploadCost(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n-1)/UploadPointBytes + 1
}

// uploadCost is the points the files of the request of ctx cost.
func uploadCost(ctx context.Context) int64 {
	n, _ := ctx.Value(uploadBytesKey{}).(int64)
	return UploadCost(n)
}

// Extension returns the gqlgen extension that checks every operation after
// parse and validation and before execution: BAD_USER_INPUT for a first
// out of the page sizes on a field it would run (pageSizes; nothing
// charged), QUERY_TOO_COSTLY over the maximum (nothing charged), then the
// login, register and searchTasks limits, then the cost budget;
// RATE_LIMITED when one of them is exhausted.
func (l *Limiter) Extension() graphql.HandlerExtension {
	return extension{l: l, schema: new(atomic.Pointer[ast.Schema])}
}

type extension struct {
	l *Limiter
	// schema is the executable schema's, which introspection is priced
	// against (cost.Operation); set by Validate when the extension is added.
	schema *atomic.Pointer[ast.Schema]
}

var (
	_ graphql.HandlerExtension        = extension{}
	_ graphql.OperationContextMutator = extension{}
)

// ExtensionName names the extension.
func (extension) ExtensionName() string { return "RateLimit" }

// Validate keeps the schema, which introspection is priced against.
func (e extension) Validate(es graphql.ExecutableSchema) error {
	e.schema.Store(es.Schema())
	return nil
}

// MutateOperationContext checks the operation against every limit.
func (e extension) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	l := e.l
	// Pricing is charged to the caller's turn, as parsing and validating
	// are: counting an introspection's fields can take milliseconds, and a
	// document refused for its cost is charged nothing else.
	started := time.Now()
	price, bad := cost.Check(e.schema.Load(), rc.Operation, rc.Variables, &pageSizes)
	cpumeter.Add(ctx, time.Since(started))
	if bad != nil {
		// Refused as its field would refuse it, before anything runs or
		// is charged, as a value gqlgen refuses is (httpapi's inputGuard).
		return outOfRange(bad)
	}
	l.metrics.cost.Observe(float64(price))
	files := uploadCost(ctx)
	o := newOutcome(ctx, rc, Outcome{Cost: cost.Add(price, files), Policy: l.costLimit(), policy: l.policyHeader, l: l})
	who := costKey(ctx)

	maxCost := l.MaxCost()
	// Every subscription reads the log when it starts (a catch-up read,
	// which may cost up to CatchUpScanCost beyond its price): one whose
	// price leaves no room for that read is refused now, before it is
	// charged, rather than at the read.
	var worst int64 // 0: not a subscription
	if rc.Operation.Operation == ast.Subscription {
		worst = cost.Add(o.Cost, CatchUpScanCost)
	}
	if price > maxCost || o.Cost > int64(o.Policy.Points) || worst > maxCost {
		l.metrics.operations.WithLabelValues(LimitCost, "too_costly").Inc()
		o.Budget, o.at = l.allow(ctx, LimitCost, who, o.Policy, 0), time.Now()
		msg, reported := fmt.Sprintf("Query cost %d exceeds the maximum of %d", price, maxCost), o.Cost
		switch {
		case price <= maxCost && o.Cost > int64(o.Policy.Points): // the files make it more than a whole budget
			maxCost = int64(o.Policy.Points)
			msg = fmt.Sprintf("The operation and its files cost %d, more than the whole budget of %d", o.Cost, maxCost)
		case price <= maxCost: // the subscription's catch-up read takes it over
			msg, reported = fmt.Sprintf("Query cost %d, with the %d points a catch-up read of the log may cost, exceeds the maximum of %d: "+
				"select less in the subscription", price, CatchUpScanCost, maxCost), worst
		}
		return &gqlerror.Error{
			Message: msg,
			Extensions: map[string]any{
				"code": string(errs.CodeQueryTooCostly), "cost": reported, "maximum": maxCost,
			},
		}
	}

	for _, c := range l.endpointChecks(ctx, rc) {
		res := l.AllowN(ctx, c.limit, c.key, c.policy, int(min(c.n, math.MaxInt32)))
		if !res.Allowed {
			l.metrics.operations.WithLabelValues(c.limit, "limited").Inc()
			o.Budget, o.at = l.allow(ctx, LimitCost, who, o.Policy, 0), time.Now()
			return o.limited(c.limit, res.RetryAfter)
		}
		l.metrics.operations.WithLabelValues(c.limit, "allowed").Inc()
	}

	o.Budget, o.at = l.allow(ctx, LimitCost, who, o.Policy, int(o.Cost)), time.Now()
	if !o.Budget.Allowed {
		l.metrics.operations.WithLabelValues(LimitCost, "limited").Inc()
		return o.limited(LimitCost, o.Budget.RetryAfter)
	}
	l.metrics.costAllowed.Inc()
	return nil
}

// pageSizes is the range of first (every slicing argument: a page size)
// that the resolvers accept, store.NewPage's: the extension refuses an
// operation with a first outside it that a field would run with before
// the operation runs or is charged (cost.Check), where the field would
// have refused it only as it ran, after the charge and beside its other
// fields.
var pageSizes = cost.Range{Min: store.MinPageSize, Max: store.MaxPageSize}

// outOfRange is the refusal of a slicing argument out of its range: the
// field's own, BAD_USER_INPUT "first must be between 1 and 100", at the
// argument's value.
func outOfRange(bad *cost.OutOfRange) *gqlerror.Error {
	err := &gqlerror.Error{
		Message:    store.RangeError(bad.Argument, bad.Range.Min, bad.Range.Max).Message,
		Extensions: map[string]any{"code": string(errs.CodeBadUserInput)},
	}
	if bad.Position != nil {
		err.Locations = []gqlerror.Location{{Line: bad.Position.Line, Column: bad.Position.Column}}
	}
	return err
}

// limited records a refusal and returns the RATE_LIMITED error.
func (o *Outcome) limited(limit string, retry time.Duration) *gqlerror.Error {
	o.Limited, o.RetryAfter = limit, retry
	return o.RateLimitedError()
}

// RateLimitedError is the RATE_LIMITED error of a refusal: "Too many requests, retry
// later" with extensions.retryAfter, the body of every 429 of a budget.
func (o *Outcome) RateLimitedError() *gqlerror.Error {
	return &gqlerror.Error{
		Message: "Too many requests, retry later",
		Extensions: map[string]any{
			"code":       string(errs.CodeRateLimited),
			"retryAfter": o.RetryAfterSeconds(),
		},
	}
}

// IsRateLimited reports whether err is the limiter's RATE_LIMITED error.
func IsRateLimited(err *gqlerror.Error) bool {
	return err != nil && err.Extensions["code"] == string(errs.CodeRateLimited)
}

// check is one endpoint limit to take n points from.
type check struct {
	limit  string
	key    string
	policy Limit
	n      int64
}

// endpointChecks lists the endpoint limits the operation uses: login per IP
// and per e-mail (each login field counts, aliases included), register per IP
// (each register field counts, whatever its outcome), searchTasks per user (or
// IP when anonymous).
func (l *Limiter) endpointChecks(ctx context.Context, rc *graphql.OperationContext) []check {
	var out []check
	switch rc.Operation.Operation {
	case ast.Mutation:
		emails := countRoot(rc.Operation.SelectionSet, "login", func(f *ast.Field) string {
			email := ""
			if a := f.Arguments.ForName("email"); a != nil && a.Value != nil {
				if v, err := a.Value.Value(rc.Variables); err == nil {
					email, _ = v.(string)
				}
			}
			return strings.ToLower(strings.TrimSpace(email))
		})
		var total int64
		for _, n := range emails {
			total = cost.Add(total, n)
		}
		if total > 0 {
			out = append(out, check{LimitLoginIP, networkKey(ctx), l.cfg.LoginPerIP, total})
			for email, n := range emails {
				// Keys hold a hash, not the address.
				sum := sha256.Sum256([]byte(email))
				out = append(out, check{LimitLoginEmail, "email:" + hex.EncodeToString(sum[:16]), l.cfg.LoginPerEmail, n})
			}
		}
		if n := countAll(rc.Operation.SelectionSet, "register"); n > 0 {
			out = append(out, check{LimitRegisterIP, networkKey(ctx), l.cfg.RegisterPerIP, n})
		}
	case ast.Query:
		if n := countAll(rc.Operation.SelectionSet, "searchTasks"); n > 0 {
			out = append(out, check{LimitSearch, identity(ctx, ""), l.cfg.Search, n})
		}
	}
	return out
}

// countRoot counts the root fields called name, grouped by key(field), through
// inline fragments and fragment spreads (memoised, so fragment "doubling"
// cannot blow it up; counts saturate).
func countRoot(set ast.SelectionSet, name string, key func(*ast.Field) string) map[string]int64 {
	if !mayHave(set, name) {
		return nil
	}
	memo := map[string]map[string]int64{}
	var walk func(ast.SelectionSet) map[string]int64
	walk = func(set ast.SelectionSet) map[string]int64 {
		out := map[string]int64{}
		merge := func(m map[string]int64) {
			for k, v := range m {
				out[k] = cost.Add(out[k], v)
			}
		}
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				if s.Name == name {
					out[key(s)] = cost.Add(out[key(s)], 1)
				}
			case *ast.InlineFragment:
				merge(walk(s.SelectionSet))
			case *ast.FragmentSpread:
				m, ok := memo[s.Name]
				if !ok && s.Definition != nil {
					memo[s.Name] = nil // cycle guard (validation rejects cycles)
					m = walk(s.Definition.SelectionSet)
					memo[s.Name] = m
				}
				merge(m)
			}
		}
		return out
	}
	return walk(set)
}

// countAll counts the root fields called name (see countRoot).
func countAll(set ast.SelectionSet, name string) int64 {
	return countRoot(set, name, func(*ast.Field) string { return "" })[""]
}

// mayHave is false when set is plain fields none of which is called name (the
// usual operation, answered without a walk); true means countRoot must look.
func mayHave(set ast.SelectionSet, name string) bool {
	for _, sel := range set {
		if f, ok := sel.(*ast.Field); !ok || f.Name == name {
			return true
		}
	}
	return false
}
