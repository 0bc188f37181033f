package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"go.opentelemetry.io/otel/trace"

	"taskflow/apq"
	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/cpumeter"
	"taskflow/errs"
	"taskflow/jsoncanon"
	"taskflow/querydoc"
	"taskflow/ratelimit"
	"taskflow/store"
)

// Media types of GraphQL over HTTP.
const (
	mediaJSON            = "application/json"
	mediaGraphQLResponse = "application/graphql-response+json"
)

// DefaultMaxBodyBytes is the largest request body the transport reads (1 MiB).
const DefaultMaxBodyBytes = 1 << 20

// MaxJSONItems bounds the JSON of a request (a POST body, a GET's variables
// and extensions, a multipart request's operations and map, a WebSocket
// message): at most 10,000 items, the members of its objects and the
// elements of its arrays (jsoncanon.WithinItems). Its bytes alone do not
// bound the work of decoding it: a body of 1 MiB of empty objects is
// 700,000 items, 90 ms of CPU and 45 MB of allocations to decode; 10,000
// items are at most a few milliseconds. No operation of the schema takes a
// hundredth of it (its longest list arguments take 50 patterns).
const MaxJSONItems = 10_000

// tooManyItems is the message of a request refused for MaxJSONItems; what
// names the part of the request.
func tooManyItems(what string) string {
	return what + " has more than " + strconv.Itoa(MaxJSONItems) + " JSON items (members of objects and elements of arrays, counted together)"
}

// Transport is TaskFlow's GraphQL-over-HTTP transport (the only one): POST
// with an application/json body {query, variables, operationName, extensions},
// and GET ?query=&variables=&operationName=&extensions= for queries only.
//
// Statuses follow the GraphQL over HTTP draft that graphql-http's audit
// checks (docs/graphql-over-http.md):
//   - 200: the operation ran (errors of fields included); and, for
//     application/json only, every other answer to a well-formed request: a
//     document that cannot be parsed (GRAPHQL_PARSE_FAILED), fails validation
//     or variable coercion (GRAPHQL_VALIDATION_FAILED), costs more than
//     MAX_QUERY_COST (QUERY_TOO_COSTLY, a validation rule of the server's), or
//     is refused by a request-level check (BAD_USER_INPUT); the draft: "The
//     server SHOULD use the 200 status code for every response to a
//     well-formed GraphQL-over-HTTP request" with that media type;
//   - 400: with application/graphql-response+json, those same errors (a
//     response without data must not be 2xx there); with either media type,
//     a body that is not a well-formed GraphQL-over-HTTP request
//     (GRAPHQL_PARSE_FAILED: malformed JSON, not an object, a missing query
//     and no persisted query, variables or extensions that are not objects,
//     invalid UTF-8, batched array bodies, which are not supported so a batch
//     cannot bypass the limits) or a malformed persistedQuery extension (hash
//     not matching the text, version other than 1);
//   - automatic persisted queries (package apq): PERSISTED_QUERY_NOT_FOUND is
//     200 for application/json (what Apollo Client expects) and 404 for
//     application/graphql-response+json;
//   - 405 with Allow: a mutation by GET (Allow: POST, refused before anything is
//     charged) or another method (Allow: GET, POST);
//   - 413: a body over MaxBodyBytes; 415: a POST that is not application/json;
//   - 429 with Retry-After and Cache-Control: no-store: RATE_LIMITED, for both
//     media types, with the body {"errors":[...]} and no data: refused by a
//     limit before execution, or refused as a whole during it (a password hash
//     that found no room under the hashing bound in time: no data, every error
//     RATE_LIMITED). The draft lets a server "forbid individual requests by a
//     client ... for any reason" with "the relevant 4xx or 5xx status code"; a
//     budget refuses the caller for a time, not the document, and only 429
//     (RFC 6585) makes Retry-After mean something to HTTP clients, retry
//     libraries and proxies: a 200 would look like a success to all of them,
//     and be retried at once.
//
// The response is application/graphql-response+json when the client's Accept
// prefers it, else application/json. Every GraphQL response carries the
// RateLimit-Policy and RateLimit headers; every body but the 429 one carries
// extensions.cost.
//
// With Tracer set, each request is a span of its own under the HTTP server
// span: named after the operation, with its type, name, cost and outcome
// (see operationSpan).
type Transport struct {
	Limiter      *ratelimit.Limiter
	MaxBodyBytes int64
	// Tracer makes the operation spans; nil is tracing off.
	Tracer trace.Tracer
	// Blobs stores the files of multipart requests (multipart.go); nil
	// refuses them (415).
	Blobs *blobs.Store
	// Uploads bounds the multipart requests of a user at once (nil: no
	// bound; NewHandler sets one).
	Uploads *uploadSlots
	Log     *slog.Logger
	// Timeout bounds the execution of each operation (REQUEST_TIMEOUT):
	// from its admission to its answer, not the request's reading, its
	// files' upload nor the wait for the caller's turn. Zero means
	// DefaultRequestTimeout. The streaming transports bound their queries
	// and mutations alike (inTurn, sseTransport); subscriptions are not
	// bounded: their streams have limits of their own.
	Timeout time.Duration
}

// maxBodyBytes is MaxBodyBytes or its default.
func (t Transport) maxBodyBytes() int64 {
	if t.MaxBodyBytes <= 0 {
		return DefaultMaxBodyBytes
	}
	return t.MaxBodyBytes
}

var _ graphql.Transport = Transport{}

// Supports accepts every request but websocket upgrades (wsTransport) and
// event streams (sseTransport, registered before it): the transport answers
// unsupported methods and media types itself, and refuses subscriptions.
func (t Transport) Supports(r *http.Request) bool { return r.Header.Get("Upgrade") == "" }

// requestError is a problem of the HTTP request itself.
type requestError struct {
	status     int
	code       string
	message    string
	allow      string
	extensions map[string]any
}

// gqlError is the GraphQL error of a request error.
func (e *requestError) gqlError() *gqlerror.Error {
	ext := map[string]any{"code": e.code}
	for k, v := range e.extensions {
		ext[k] = v
	}
	return &gqlerror.Error{Message: e.message, Extensions: ext}
}

// setHeaders sets the headers of e's answer: Allow, the bearer challenge of
// a 401, the Retry-After of UNAVAILABLE.
func (e *requestError) setHeaders(w http.ResponseWriter) {
	if e.allow != "" {
		w.Header().Set("Allow", e.allow)
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskflow"`)
	}
	if e.code == string(errs.CodeUnavailable) {
		w.Header().Set("Retry-After", strconv.Itoa(unavailableRetryAfter))
	}
}

// Do serves one GraphQL request.
func (t Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ctx, op := startOperation(r.Context(), t.Tracer)
	ctx = context.WithValue(ctx, oneResultKey{}, true)
	defer op.end()
	media := negotiate(r.Header.Values("Accept"))
	w.Header().Set("Content-Type", media)
	w.Header().Add("Vary", "Accept")
	start := graphql.Now()

	// The caller's turn through reading, parsing, validating and pricing:
	// ended once the operation is prepared, or once it is answered when it
	// is heavy or anonymous (below).
	ctx, body, endTurnOnce, ok := t.turn(ctx, w, r)
	if !ok {
		return
	}
	defer endTurnOnce()

	var params *graphql.RawParams
	var reqErr *requestError
	var files *multipartFiles
	decoding := time.Now()
	switch r.Method {
	case http.MethodGet:
		params, reqErr = paramsFromQuery(r)
		ctx = context.WithValue(ctx, getRequestKey{}, true)
	case http.MethodPost:
		if isMultipart(r) {
			params, files, reqErr = t.paramsFromMultipart(w, r)
			if files != nil {
				ctx = ratelimit.WithUploadBytes(ctx, files.declared)
				defer files.release(ctx) // also when the operation is refused or panics
			}
		} else {
			params, reqErr = t.paramsFromBody(w, r)
		}
	default:
		reqErr = &requestError{status: http.StatusMethodNotAllowed, code: errcode.ParseFailed,
			message: "method not allowed: use GET or POST", allow: "GET, POST"}
	}
	cpumeter.Add(ctx, time.Since(decoding)-body.waited) // decoding, not waiting for the body
	if reqErr != nil {
		reqErr.setHeaders(w)
		t.writeErrors(ctx, w, exec, nil, op, reqErr.status, gqlerror.List{reqErr.gqlError()})
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}

	if t.Limiter != nil {
		ctx = ratelimit.WithOutcome(ctx)
	}
	rc, opErrs := exec.CreateOperationContext(ctx, params)
	heavy := querydoc.Heavy(rc)
	if !executesInTurn(ctx, rc) {
		endTurnOnce()
	}
	if all := querydoc.Errors(rc); all != nil {
		opErrs = all // gqlgen reports only the first error of an extension
	}
	if opErrs != nil {
		status := statusFor(media, opErrs)
		if apq.Refused(rc) {
			status = http.StatusBadRequest
		}
		if isGET(ctx) && rc != nil && rc.Operation != nil && rc.Operation.Operation != ast.Query {
			status = http.StatusMethodNotAllowed
			w.Header().Set("Allow", "POST")
		}
		t.writeErrors(ctx, w, exec, rc, op, status, opErrs)
		return
	}

	if files != nil {
		// The operation is admitted: its files go to the blob store now.
		if reqErr := files.stream(ctx); reqErr != nil {
			reqErr.setHeaders(w)
			t.writeErrors(ctx, w, exec, rc, op, reqErr.status, gqlerror.List{reqErr.gqlError()})
			return
		}
	}

	executing := time.Now()
	var writeBy time.Time
	if files != nil {
		writeBy = files.transferBy
	}
	resp := t.execute(ctx, w, exec, rc, writeBy)
	if heavy {
		cpumeter.Add(ctx, time.Since(executing)) // gqlgen collecting its fields
	}
	if files != nil {
		files.release(ctx) // before the answer: what it names is all that is stored
	}
	o := t.outcome(ctx, rc)
	op.record(rc, outcomeOf(resp), o)
	setRateLimitHeaders(w, o)
	if retry, ok := refusedBusy(resp); ok {
		writeTooManyFor(w, retry, resp)
		return
	}
	var cost *costStatus
	if o != nil {
		c := t.costExtension(o)
		actual := o.Cost + o.Extra // the operation ran: what it took (each at most MaxCost)
		c.ActualQueryCost = &actual
		cost = &c
	}
	writeResponse(w, resp, cost)
}

// execute runs the admitted operation rc within the operation's time bound
// (Timeout): past it, the operation's context ends with errRequestTimeout,
// which cancels its statements in Postgres (store.CancelStatements), and
// the fields cut short are TIMEOUT (presentError). The bound starts here,
// once the request is read, its files stored and the operation admitted and
// charged, so that neither a slow upload nor the wait for the caller's turn
// counts against it; whatever runs after it (the files' release, the
// answer) runs on ctx.
//
// The answer's write deadline is set here too, to the operation's deadline
// and answerWriteMargin (or writeBy, when later: an upload's transfer). The
// server's WriteTimeout counts from the end of the request's headers, so a
// body read slowly (up to the server's ReadTimeout) and an operation run
// to its bound would otherwise outlast it, and the answer be lost: the
// client would get a closed connection where the contract promises TIMEOUT.
func (t Transport) execute(ctx context.Context, w http.ResponseWriter, exec graphql.GraphExecutor,
	rc *graphql.OperationContext, writeBy time.Time,
) *graphql.Response {
	ctx, end := withRequestTimeout(ctx, t.Timeout)
	defer end()
	if d, ok := ctx.Deadline(); ok {
		if by := d.Add(answerWriteMargin); by.After(writeBy) {
			writeBy = by
		}
		_ = http.NewResponseController(w).SetWriteDeadline(writeBy)
	}
	responses, ctx := exec.DispatchOperation(ctx, rc)
	return responses(ctx)
}

// turn waits for the caller's turn (ratelimit.Limiter.Turn) and returns the
// context that meters the turn's work (package cpumeter), r's body, timed
// (cpumeter.Add the decoding's time less body.waited), and the function that
// ends the turn once, charging that work: never the time spent waiting for the
// body, Postgres or Redis. A refused turn is answered 429 here, and ok is
// false. Without a limiter there is no turn.
func (t Transport) turn(ctx context.Context, w http.ResponseWriter, r *http.Request) (_ context.Context, body *timedBody, end func(), ok bool) {
	body = &timedBody{ReadCloser: r.Body}
	if t.Limiter == nil {
		return ctx, body, func() {}, true // nothing is charged: no meter
	}
	ctx, work := cpumeter.With(ctx)
	endTurn, err := t.Limiter.Turn(ctx)
	if err != nil {
		retry, list := turnRefusal(err)
		writeTooMany(w, retry, list)
		return ctx, body, nil, false
	}
	r.Body = body
	var once sync.Once
	return ctx, body, func() { once.Do(func() { endTurn(work.Spent()) }) }, true
}

// executesInTurn reports whether the operation rc, prepared for the caller of
// ctx, executes in its caller's turn, which then ends once the operation is
// answered, on every transport: a heavy document (querydoc.Heavy says why),
// and an anonymous caller's operation: the only work an anonymous operation
// can ask for is a sign-up or sign-in, whose password hash is tens of
// milliseconds of CPU; in its caller's turn, a burst of them from one address
// runs one at a time and is paced like its documents (bench/abuse: 60 sign-ups
// at once took a signed-in client's slowest request to 39 ms, 10 times its
// p99). A subscription never does: it lasts as long as its stream, and its
// events are paid from the cost budget.
func executesInTurn(ctx context.Context, rc *graphql.OperationContext) bool {
	if rc != nil && rc.Operation != nil && rc.Operation.Operation == ast.Subscription {
		return false
	}
	return querydoc.Heavy(rc) || auth.UserFrom(ctx) == nil
}

// turnRefusal is the error of a refused turn (ratelimit.Limiter.Turn), and
// its retryAfter in seconds.
func turnRefusal(err error) (int, gqlerror.List) {
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeRateLimited {
		// The client went away while it waited: nobody reads this.
		e = &errs.Error{Message: "the request ended before its turn"}
	}
	retry, _ := e.Extensions["retryAfter"].(int)
	retry = max(retry, 1)
	return retry, gqlerror.List{{Message: e.Message,
		Extensions: map[string]any{"code": string(errs.CodeRateLimited), "retryAfter": retry}}}
}

// inTurn is an executor that prepares each operation in its caller's turn,
// charged the work of preparing it (Transport.turn): the WebSocket transport
// prepares each operation's document through it, so that a connection
// cannot parse documents beside its caller's turn. An operation that executes
// in its turn (executesInTurn: a heavy document, an anonymous caller's
// operation) keeps it until DispatchOperation has answered it, as over HTTP.
type inTurn struct {
	graphql.GraphExecutor
	limiter *ratelimit.Limiter
	// db, when set, checks the connection's token again for each operation
	// (a WebSocket's): one logged out or revoked since connection_init runs
	// nothing more, within the second sessions are remembered.
	db *store.DB
	// guard bounds the client's invalid tokens in those checks (nil: none).
	guard auth.Guard
	// timeout bounds each query and mutation (REQUEST_TIMEOUT, as
	// Transport.Timeout); subscriptions last as long as their streams.
	timeout time.Duration
}

// CreateOperationContext prepares the operation in its caller's turn, or
// refuses it with the turn's RATE_LIMITED, or UNAUTHENTICATED when the
// connection's token no longer holds.
func (e inTurn) CreateOperationContext(ctx context.Context, p *graphql.RawParams) (*graphql.OperationContext, gqlerror.List) {
	rc, list, turn := e.prepare(ctx, p)
	if turn != nil && (list != nil || !executesInTurn(ctx, rc)) {
		turn.end(0)
		turn = nil
	}
	if list == nil && e.db != nil && rc.Operation != nil && rc.Operation.Operation != ast.Subscription {
		// A subscription checks its token as it starts (LiveAccess).
		if tok := auth.TokenFrom(ctx); tok != "" {
			// Another error (the database unreachable) is left to the operation,
			// which meets it too and reports it through the presenter.
			_, err := auth.Authenticate(ctx, e.db, e.guard, tok)
			if code := errs.CodeOf(err); code == errs.CodeUnauthenticated || code == errs.CodeRateLimited {
				if turn != nil {
					turn.end(0)
				}
				ext := map[string]any{"code": string(code)}
				var ee *errs.Error
				if errors.As(err, &ee) && ee.Extensions["retryAfter"] != nil {
					ext["retryAfter"] = ee.Extensions["retryAfter"]
				}
				return nil, gqlerror.List{{Message: err.Error(), Extensions: ext}}
			}
		}
	}
	if turn != nil {
		rc.Stats.SetExtension(heldTurnKey, turn) // ended by DispatchOperation
	}
	return rc, list
}

// DispatchError presents the errors of an operation refused before it ran.
// gqlgen's WebSocket transport answers such an operation with its errors
// only, so the refusal's extensions.deprecations (withDeprecations) are
// noted on the connection, which adds them to that answer
// (wsConn.refusedWith): a refusal carries them on every transport.
func (e inTurn) DispatchError(ctx context.Context, list gqlerror.List) *graphql.Response {
	resp := e.GraphExecutor.DispatchError(ctx, list)
	if c := wsConnFrom(ctx); c != nil {
		if ext := deprecationsOnly(resp.Extensions); ext != nil {
			c.refusedWith(ext)
		}
	}
	return resp
}

// DispatchOperation runs the operation, a query or a mutation within
// REQUEST_TIMEOUT (its one result is asked for once; a connection that
// closes first leaves the bound to end by itself); one that keeps its turn
// (CreateOperationContext) ends it once answered, charged the work of its
// execution (its password hashes; all of it for a heavy document).
func (e inTurn) DispatchOperation(ctx context.Context, rc *graphql.OperationContext) (graphql.ResponseHandler, context.Context) {
	if rc.Operation == nil || rc.Operation.Operation == ast.Subscription {
		return e.dispatch(ctx, rc)
	}
	ctx, endOp := withRequestTimeout(ctx, e.timeout)
	responses, ctx := e.dispatch(ctx, rc)
	return func(ctx context.Context) *graphql.Response {
		defer endOp()
		return responses(ctx)
	}, ctx
}

// dispatch is DispatchOperation without the time bound.
func (e inTurn) dispatch(ctx context.Context, rc *graphql.OperationContext) (graphql.ResponseHandler, context.Context) {
	turn, _ := rc.Stats.GetExtension(heldTurnKey).(*heldTurn)
	if turn == nil {
		return e.GraphExecutor.DispatchOperation(ctx, rc)
	}
	dispatched := false
	defer func() {
		if !dispatched { // a panic: the turn is not left held
			turn.end(0)
		}
	}()
	responses, ctx := e.GraphExecutor.DispatchOperation(cpumeter.Into(ctx, turn.work), rc)
	dispatched = true
	heavy := querydoc.Heavy(rc)
	return func(ctx context.Context) *graphql.Response {
		executing := time.Now()
		defer func() {
			executed := time.Duration(0)
			if heavy {
				executed = time.Since(executing) // gqlgen collecting its fields
			}
			turn.end(executed)
		}()
		return responses(ctx)
	}, ctx
}

// heldTurnKey is where CreateOperationContext leaves, in an operation's
// stats, the turn the operation executes in.
const heldTurnKey = "taskflow.turn"

// heldTurn is a caller's turn taken by inTurn, with the meter of its work.
type heldTurn struct {
	work *cpumeter.Meter
	once sync.Once
	done ratelimit.EndTurn
}

// end ends the turn once, charging its metered work and executed more; a
// nil turn (no limiter) ends nothing.
func (t *heldTurn) end(executed time.Duration) {
	if t == nil {
		return
	}
	t.once.Do(func() { t.done(t.work.Spent() + executed) })
}

// prepare is CreateOperationContext in the caller's turn, which it returns
// still held (nil without a limiter, or when the turn was refused): over a
// WebSocket, the turn its long message was read in (wsConn.NextReader).
func (e inTurn) prepare(ctx context.Context, p *graphql.RawParams) (*graphql.OperationContext, gqlerror.List, *heldTurn) {
	if e.limiter == nil {
		rc, list := e.GraphExecutor.CreateOperationContext(ctx, p)
		return rc, list, nil
	}
	var turn *heldTurn
	var decoded time.Duration
	if c := wsConnFrom(ctx); c != nil {
		// The turn its message was read and decoded in (wsConn.NextReader),
		// or, a small message, the time gqlgen took to decode it.
		turn, decoded = c.takeTurn()
	}
	if turn == nil {
		end, err := e.limiter.Turn(ctx)
		if err != nil {
			_, list := turnRefusal(err)
			return nil, list, nil
		}
		_, work := cpumeter.With(ctx)
		turn = &heldTurn{work: work, done: end}
	}
	ctx = cpumeter.Into(ctx, turn.work)
	cpumeter.Add(ctx, decoded)
	prepared := false
	defer func() {
		if !prepared { // a panic: the turn is not left held
			turn.end(0)
		}
	}()
	rc, list := e.GraphExecutor.CreateOperationContext(ctx, p)
	prepared = true
	return rc, list, turn
}

// writeResponse writes an executed operation's response with status 200, and
// extensions.cost when cost is not nil. The data is gqlgen's own JSON and is
// copied as it is: encoding/json would compact and re-validate it byte by byte
// (16% of the server's CPU on a page of 50 audit events, docs/decisions/2026-11-30-response-writer.md).
func writeResponse(w http.ResponseWriter, resp *graphql.Response, cost *costStatus) {
	if resp.Label != "" || resp.Path != nil || resp.HasNext != nil {
		// Incremental delivery, which this transport does not use: the generic way.
		if cost != nil {
			if resp.Extensions == nil {
				resp.Extensions = map[string]any{}
			}
			resp.Extensions["cost"] = *cost
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	var b bytes.Buffer
	b.Grow(len(resp.Data) + 256)
	b.WriteByte('{')
	if len(resp.Errors) > 0 {
		b.WriteString(`"errors":`)
		if err := json.NewEncoder(&b).Encode(resp.Errors); err != nil {
			writeJSON(w, http.StatusOK, resp) // reports the failure as INTERNAL
			return
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		b.WriteByte(',')
	}
	b.WriteString(`"data":`)
	if len(resp.Data) == 0 {
		b.WriteString("null")
	} else {
		b.Write(resp.Data)
	}
	var ext any
	switch {
	case len(resp.Extensions) > 0:
		if cost != nil {
			resp.Extensions["cost"] = *cost
		}
		ext = resp.Extensions
	case cost != nil: // the usual case, without making a map
		ext = costOnly{*cost}
	}
	if ext != nil {
		b.WriteString(`,"extensions":`)
		if err := json.NewEncoder(&b).Encode(ext); err != nil {
			writeJSON(w, http.StatusOK, resp)
			return
		}
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('}')
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// costOnly is the extensions object {cost}.
type costOnly struct {
	Cost costStatus `json:"cost"`
}

// writeErrors answers a request that did not execute, and records it on op.
func (t Transport) writeErrors(ctx context.Context, w http.ResponseWriter, exec graphql.GraphExecutor,
	rc *graphql.OperationContext, op *operationSpan, status int, errs gqlerror.List,
) {
	if rc != nil {
		ctx = graphql.WithOperationContext(ctx, rc)
	}
	presented := exec.DispatchError(ctx, errs)
	o := t.outcome(ctx, rc)
	op.record(rc, outcomeOf(presented), o)
	setRateLimitHeaders(w, o)
	if o != nil && o.Limited != "" {
		writeTooManyFor(w, o.RetryAfterSeconds(), presented)
		return
	}
	ext := presented.Extensions
	if o != nil {
		if ext == nil {
			ext = map[string]any{}
		}
		ext["cost"] = t.costExtension(o)
	}
	writeJSON(w, status, struct {
		Errors     gqlerror.List  `json:"errors"`
		Extensions map[string]any `json:"extensions,omitempty"`
	}{presented.Errors, ext})
}

// writeTooMany answers 429 with Retry-After (whole seconds), Cache-Control:
// no-store and the body {"errors": list}.
func writeTooMany(w http.ResponseWriter, retryAfter int, list gqlerror.List) {
	writeTooManyFor(w, retryAfter, &graphql.Response{Errors: list})
}

// writeTooManyFor answers 429 as writeTooMany does for resp, an operation's
// answer: its errors, and its extensions.deprecations when it has them (a
// refused operation's warning too), none of its other extensions.
func writeTooManyFor(w http.ResponseWriter, retryAfter int, resp *graphql.Response) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusTooManyRequests, struct {
		Errors     gqlerror.List  `json:"errors"`
		Extensions map[string]any `json:"extensions,omitempty"`
	}{resp.Errors, deprecationsOnly(resp.Extensions)})
}

// refusedBusy reports whether an executed operation was refused as a whole
// with RATE_LIMITED by its resolvers (a password hash that found no room in
// time): no data, and every error RATE_LIMITED. It returns the largest
// retryAfter of the errors, at least 1.
func refusedBusy(resp *graphql.Response) (int, bool) {
	if len(resp.Errors) == 0 || len(resp.Data) != 0 && string(resp.Data) != "null" {
		return 0, false
	}
	retry := 1
	for _, e := range resp.Errors {
		if code, _ := e.Extensions["code"].(string); code != string(errs.CodeRateLimited) {
			return 0, false
		}
		if n, ok := e.Extensions["retryAfter"].(int); ok {
			retry = max(retry, n)
		}
	}
	return retry, true
}

// outcome is the limiter's decision on the operation, or the caller's budget
// read without charge when the limiter never saw it.
func (t Transport) outcome(ctx context.Context, rc *graphql.OperationContext) *ratelimit.Outcome {
	if t.Limiter == nil {
		return nil
	}
	if o := ratelimit.OutcomeOf(ctx, rc); o != nil {
		return o
	}
	return t.Limiter.Peek(ctx)
}

// setRateLimitHeaders writes the IETF RateLimit draft headers of the cost
// budget, for /query and the routes beside it that charge it (budget.go).
func setRateLimitHeaders(w http.ResponseWriter, o *ratelimit.Outcome) {
	if o == nil {
		return
	}
	// Assigned under their canonical keys (what Header.Set would store), which
	// saves canonicalising them on every response.
	h := w.Header()
	// Both values in one backing array: one allocation less per response.
	v := []string{o.PolicyHeader(), `"cost";r=` + strconv.Itoa(o.Budget.Remaining) + `;t=` + strconv.Itoa(o.ResetSeconds())}
	h["Ratelimit-Policy"] = v[0:1:1]
	h["Ratelimit"] = v[1:2:2]
}

// costStatus is extensions.cost.
type costStatus struct {
	RequestedQueryCost int64 `json:"requestedQueryCost"`
	// ActualQueryCost is what an operation that ran took from the budget:
	// RequestedQueryCost and the overruns of lists longer than priced
	// (ratelimit.ChargeOverrun). Absent when the operation did not run.
	ActualQueryCost *int64         `json:"actualQueryCost,omitempty"`
	ThrottleStatus  throttleStatus `json:"throttleStatus"`
}

// throttleStatus is extensions.cost.throttleStatus.
type throttleStatus struct {
	MaximumAvailable   int     `json:"maximumAvailable"`
	CurrentlyAvailable int     `json:"currentlyAvailable"`
	RestoreRate        float64 `json:"restoreRate"`
}

// costExtension is extensions.cost.
func (t Transport) costExtension(o *ratelimit.Outcome) costStatus {
	return costStatus{RequestedQueryCost: o.Cost, ThrottleStatus: throttleStatus{
		MaximumAvailable:   o.Policy.Points,
		CurrentlyAvailable: o.Budget.Remaining,
		RestoreRate:        float64(o.Policy.Points) / o.Policy.Window.Seconds(),
	}}
}

// statusFor maps the errors that stopped a well-formed request's operation
// before execution (see Transport for why).
func statusFor(media string, list gqlerror.List) int {
	for _, e := range list {
		switch code, _ := e.Extensions["code"].(string); code {
		case apq.CodeNotFound:
			// The first answer of the protocol: Apollo Client retries with the
			// text on a 200 JSON answer; a GraphQL response must not be 2xx
			// without data, so it is 404 there (also retried: not 400/500).
			if media == mediaGraphQLResponse {
				return http.StatusNotFound
			}
			return http.StatusOK
		case string(errs.CodeRateLimited):
			return http.StatusTooManyRequests
		}
	}
	if media == mediaGraphQLResponse {
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// paramsFromQuery reads a GET request's parameters.
func paramsFromQuery(r *http.Request) (*graphql.RawParams, *requestError) {
	q := r.URL.Query()
	for k, vs := range q {
		for _, v := range vs {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, parseError(http.StatusBadRequest, "the query string is not valid UTF-8")
			}
		}
	}
	p := &graphql.RawParams{Query: q.Get("query"), OperationName: q.Get("operationName")}
	if v := q.Get("variables"); v != "" {
		if !jsoncanon.WithinItems(v, MaxJSONItems) {
			return nil, parseError(http.StatusBadRequest, tooManyItems("variables"))
		}
		if err := decodeObject(v, &p.Variables); err != nil {
			return nil, parseError(http.StatusBadRequest, "variables is not a JSON object")
		}
	}
	if v := q.Get("extensions"); v != "" {
		if !jsoncanon.WithinItems(v, MaxJSONItems) {
			return nil, parseError(http.StatusBadRequest, tooManyItems("extensions"))
		}
		if err := decodeObject(v, &p.Extensions); err != nil {
			return nil, parseError(http.StatusBadRequest, "extensions is not a JSON object")
		}
	}
	if p.Query == "" && !persisted(p.Extensions) {
		return nil, parseError(http.StatusBadRequest, "the query parameter is missing")
	}
	return p, nil
}

// postBody is the JSON body of a POST.
type postBody struct {
	Query         *string        `json:"query"`
	Variables     map[string]any `json:"variables"`
	OperationName *string        `json:"operationName"`
	Extensions    map[string]any `json:"extensions"`
}

// decodeBody decodes a POST body into a postBody as decodeObject does with
// encoding/json: a member named as a field in any case sets it (in the order
// they are written; null sets nil; a second object merges into the first's
// map), other members are skipped, and a value of the wrong type is an
// error. It reads with jsoncanon, without encoding/json's reflection (3 to 5%
// of a small read's server CPU in profiles of 2026-12-03,
// docs/decisions/2026-12-03-canonical-encoding.md), and leaves to
// decodeObject what jsoncanon declines (FuzzDecodeBody compares them).
// Every string, key and json.Number it gives has memory of its own, as
// encoding/json's do (jsoncanon's Copy): the query is kept by the document
// caches, weighed by its own length, and a subscription keeps its variables
// (and persisted-query extension) for its life; neither may keep the body's
// megabyte with it (TestDecodedQueryDoesNotHoldTheBody,
// TestSubscriptionVariablesDoNotHoldTheBody).
func decodeBody(body []byte) (postBody, error) {
	var b postBody
	wrongType := false
	text := func(v any) (*string, bool) {
		switch v := v.(type) {
		case nil:
			return nil, true
		case string:
			return &v, true
		}
		return nil, false
	}
	object := func(into map[string]any, v any) (map[string]any, bool) {
		switch v := v.(type) {
		case nil:
			return nil, true
		case map[string]any:
			if into == nil {
				return v, true
			}
			for k, e := range v {
				into[k] = e
			}
			return into, true
		}
		return into, false
	}
	ok := jsoncanon.Decoder{Copy: true}.DecodeFields(body, func(key string, v any) {
		fine := true
		switch {
		case strings.EqualFold(key, "query"):
			if q, ok := text(v); ok {
				b.Query = q
			} else {
				fine = false
			}
		case strings.EqualFold(key, "operationName"):
			if n, ok := text(v); ok {
				b.OperationName = n
			} else {
				fine = false
			}
		case strings.EqualFold(key, "variables"):
			b.Variables, fine = object(b.Variables, v)
		case strings.EqualFold(key, "extensions"):
			b.Extensions, fine = object(b.Extensions, v)
		}
		wrongType = wrongType || !fine
	})
	if !ok {
		b = postBody{}
		err := decodeObject(string(body), &b)
		return b, err
	}
	if wrongType {
		return postBody{}, errors.New("a member of the body has the wrong type")
	}
	return b, nil
}

// paramsFromBody reads a POST request's JSON body.
func (t Transport) paramsFromBody(w http.ResponseWriter, r *http.Request) (*graphql.RawParams, *requestError) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != mediaJSON {
		msg := "the body must be application/json"
		if t.Blobs != nil {
			msg += ", or multipart/form-data with files"
		}
		return nil, parseError(http.StatusUnsupportedMediaType, msg)
	}
	limit := t.maxBodyBytes()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, parseError(http.StatusRequestEntityTooLarge, "the body is larger than "+strconv.FormatInt(limit, 10)+" bytes")
		}
		return nil, parseError(http.StatusBadRequest, "the body could not be read")
	}
	return paramsFromJSON(body)
}

// persisted reports whether the extensions carry a persisted query, which
// stands in for the query text (automatic persisted queries, package apq).
func persisted(ext map[string]any) bool { return ext["persistedQuery"] != nil }

// decodeObject decodes exactly one JSON object (numbers kept exact).
func decodeObject(s string, v any) error {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		return errors.New("not an object")
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func parseError(status int, msg string) *requestError {
	return &requestError{status: status, code: errcode.ParseFailed, message: msg}
}

// negotiate picks the response media type from Accept: the GraphQL response
// type when the client prefers it (highest q, ties going to it), else JSON.
func negotiate(accept []string) string {
	bestGQL, bestJSON := -1.0, -1.0
	for _, header := range accept {
		for _, part := range strings.Split(header, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
			if q <= 0 {
				continue
			}
			switch mt {
			case mediaGraphQLResponse:
				bestGQL = max(bestGQL, q)
			case mediaJSON, "application/*", "*/*":
				bestJSON = max(bestJSON, q)
			}
		}
	}
	if bestGQL >= 0 && bestGQL >= bestJSON {
		return mediaGraphQLResponse
	}
	return mediaJSON
}

// writeJSON writes v with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// oneResultKey marks the context of a request answered with one result: no
// subscription.
type oneResultKey struct{}

// getRequestKey marks the context of a GET request.
type getRequestKey struct{}

func isGET(ctx context.Context) bool { v, _ := ctx.Value(getRequestKey{}).(bool); return v }

// methodGuard refuses a mutation sent by GET before anything else looks at
// it (it is installed before the rate limiter, so nothing is charged).
type methodGuard struct{}

var (
	_ graphql.HandlerExtension        = methodGuard{}
	_ graphql.OperationContextMutator = methodGuard{}
)

// ExtensionName names the extension.
func (methodGuard) ExtensionName() string { return "MethodGuard" }

// Validate accepts any schema.
func (methodGuard) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext refuses anything but a query over GET, and a
// subscription over plain HTTP.
func (methodGuard) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if one, _ := ctx.Value(oneResultKey{}).(bool); one && rc.Operation != nil && rc.Operation.Operation == ast.Subscription {
		return &gqlerror.Error{
			Message: "a subscription needs a streaming transport: graphql-ws (WebSocket, subprotocol graphql-transport-ws) " +
				"or Server-Sent Events (Accept: text/event-stream) at this endpoint",
			Extensions: map[string]any{"code": string(errs.CodeBadUserInput)},
		}
	}
	if isGET(ctx) && rc.Operation != nil && rc.Operation.Operation != ast.Query {
		return &gqlerror.Error{
			Message:    "only queries may be sent by GET; send mutations by POST",
			Extensions: map[string]any{"code": string(errs.CodeBadUserInput)},
		}
	}
	return nil
}

// extensionsKept keeps of a request's extensions what the server reads,
// persistedQuery's version and sha256Hash, and drops the rest before gqlgen
// copies them into the operation's context, which a subscription keeps for
// its life: the extensions of a 1 MiB request, decoded, weigh up to twenty
// times as much (empty objects), and a user may hold 100 subscriptions on an
// instance. A persistedQuery that is not an object is kept as sent, for the
// persisted-query extension to refuse.
type extensionsKept struct{}

var (
	_ graphql.HandlerExtension          = extensionsKept{}
	_ graphql.OperationParameterMutator = extensionsKept{}
)

// ExtensionName names the extension.
func (extensionsKept) ExtensionName() string { return "ExtensionsKept" }

// Validate accepts any schema.
func (extensionsKept) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationParameters replaces p's extensions by what the server reads
// of them (none: nil).
func (extensionsKept) MutateOperationParameters(_ context.Context, p *graphql.RawParams) *gqlerror.Error {
	pq, ok := p.Extensions["persistedQuery"]
	if !ok {
		p.Extensions = nil
		return nil
	}
	if m, isObject := pq.(map[string]any); isObject {
		kept := map[string]any{}
		for _, k := range []string{"version", "sha256Hash"} {
			if v, ok := m[k]; ok {
				kept[k] = v
			}
		}
		pq = kept
	}
	p.Extensions = map[string]any{"persistedQuery": pq}
	return nil
}

// timedBody is a request body that adds up the time its reads wait: the time
// spent waiting for the client, not charged to its turn.
type timedBody struct {
	io.ReadCloser
	waited time.Duration
}

func (b *timedBody) Read(p []byte) (int, error) {
	start := time.Now()
	n, err := b.ReadCloser.Read(p)
	b.waited += time.Since(start)
	return n, err
}
