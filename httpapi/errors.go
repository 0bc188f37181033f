package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/reqinfo"
	"taskflow/store"
)

// presentError is the one error presenter: a domain *errs.Error becomes its code
// and message (with its extensions); errors gqlgen made itself (parse,
// validation, argument coercion) keep their message with a code; a statement
// cut short by the operation's time bound is TIMEOUT, logged at WARN
// (timedOut); a failure of the moment of a dependency (blobs.Transient) is
// UNAVAILABLE with retryAfter, logged at WARN (unavailable); anything else
// is logged with the request id
// and shown as INTERNAL with nothing of its internals.
// It emits only the contract's codes (errs.All): an error with another code is
// a bug, logged and shown as INTERNAL.
func presentError(log *slog.Logger) graphql.ErrorPresenterFunc {
	present := presentKnown(log)
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := present(ctx, err)
		if code, _ := gqlErr.Extensions["code"].(string); !errs.Known(code) {
			return internalError(ctx, log, err, gqlErr)
		}
		return gqlErr
	}
}

// presentKnown is presentError before its check of the code.
func presentKnown(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		var domain *errs.Error
		if errors.As(err, &domain) {
			return shown(gqlErr, domain)
		}
		var orig *gqlerror.Error
		if errors.As(err, &orig) && orig.Err == nil {
			// Made by gqlgen or gqlparser: a problem with the request itself.
			if gqlErr.Extensions == nil {
				gqlErr.Extensions = map[string]any{}
			}
			if _, ok := gqlErr.Extensions["code"]; !ok {
				gqlErr.Extensions["code"] = string(errs.CodeBadUserInput)
			}
			return gqlErr
		}
		if errors.As(err, &orig) && isArgumentError(ctx, orig) {
			// An argument value gqlgen could not coerce (e.g. a bad Time): the
			// request's fault, reported with the argument's path.
			gqlErr.Extensions = map[string]any{"code": string(errs.CodeBadUserInput)}
			return gqlErr
		}
		if e := inputRefusedByPostgres(ctx, log, err); e != nil {
			return shown(gqlErr, e)
		}
		if e := timedOut(ctx, log, err, gqlErr.Path.String()); e != nil {
			return shown(gqlErr, e)
		}
		if e := unavailable(ctx, log, err, "path", gqlErr.Path.String()); e != nil {
			return shown(gqlErr, e)
		}
		return internalError(ctx, log, err, gqlErr)
	}
}

// shown returns gqlErr showing e: its message, and its code with its
// extensions.
func shown(gqlErr *gqlerror.Error, e *errs.Error) *gqlerror.Error {
	gqlErr.Message = e.Message
	ext := map[string]any{"code": string(e.Code)}
	for k, v := range e.Extensions {
		ext[k] = v
	}
	gqlErr.Extensions = ext
	return gqlErr
}

// errRequestTimeout is the cause of the end of an operation's context at
// its time bound (withRequestTimeout).
var errRequestTimeout = errors.New("the operation ran past REQUEST_TIMEOUT")

// answerWriteMargin is the time an operation's answer has to be written
// after the operation's deadline (Transport.execute): its statements'
// cancellation (up to 2 s before a connection is closed instead), a commit
// under way, the files' release and the write of a large answer.
const answerWriteMargin = 10 * time.Second

// withRequestTimeout returns the context of an operation, ctx bounded by d
// (DefaultRequestTimeout when d is zero), ending with the cause
// errRequestTimeout, and the function that ends the operation: it cancels
// that context, then logs the operation's fields cut short by the bound
// (timedOut), if any, in one line. It must be called once every field's
// error was presented.
func withRequestTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = DefaultRequestTimeout
	}
	c := &cutShort{}
	opCtx, cancel := context.WithTimeoutCause(context.WithValue(ctx, cutShortKey{}, c), d, errRequestTimeout)
	return opCtx, func() {
		cancel()
		c.end(ctx)
	}
}

// cutShortKey is where withRequestTimeout leaves an operation's cutShort.
type cutShortKey struct{}

// cutShort tallies the fields of one operation cut short by its time bound
// (timedOut), for the operation to log them in one line as it ends
// (withRequestTimeout): an operation whose fields all wait on one lock is
// one event, and a line per field would bury the others (up to hundreds for
// a query of many aliases).
type cutShort struct {
	mu    sync.Mutex
	ended bool
	// log is the presenter's logger; fields the number of fields cut short;
	// err, path and operation the first one's error, path and operation name.
	log             *slog.Logger
	fields          int
	err             error
	path, operation string
}

// note counts a field cut short, and reports whether it was counted: false
// once the operation has ended (its line logged), when the caller logs the
// field itself.
func (c *cutShort) note(log *slog.Logger, err error, path, operation string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	if c.fields == 0 {
		c.log, c.err, c.path, c.operation = log, err, path, operation
	}
	c.fields++
	return true
}

// end logs the fields cut short, if any, at WARN, with ctx's request id.
func (c *cutShort) end(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.fields > 0 {
		logTimedOut(ctx, c.log, c.fields, c.err, c.path, c.operation)
	}
}

// logTimedOut logs, at WARN, that fields fields of the operation named
// operation were cut short by its time bound, the first at path with err.
func logTimedOut(ctx context.Context, log *slog.Logger, fields int, err error, path, operation string) {
	log.WarnContext(ctx, "operation stopped at REQUEST_TIMEOUT", "fields", fields, "err", err,
		"request_id", reqinfo.From(ctx).RequestID, "operation", operation, "path", path)
}

// errTimeout is the error shown for a field cut short by the operation's
// time bound.
var errTimeout = errs.Errorf(errs.CodeTimeout, "the operation ran past the server's time bound (REQUEST_TIMEOUT) "+
	"and was stopped; nothing of this field was committed: retry with the same idempotency key, or ask for less")

// timedOut returns the TIMEOUT error shown in place of err when err is a
// statement (or a wait for a connection) cut short because the operation of
// ctx ran past its time bound (withRequestTimeout), and counts it for the
// operation's one line at WARN (cutShort), with the request id, the
// operation's name, the number of fields cut short, the first's path and
// error: no bug, and no
// failure of a dependency, but an operation slower than the server allows,
// or one waiting on another's lock. For any other error it returns nil:
// one whose context ended otherwise (its client went away, a shutdown)
// stays UNAVAILABLE (unavailable), and an error that is not the
// cancellation stays what it is, even past the bound.
func timedOut(ctx context.Context, log *slog.Logger, err error, path string) *errs.Error {
	if !store.Canceled(err) {
		return nil
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done() // past the deadline: its timer ends ctx at once, if no cancel did first
	}
	if !errors.Is(context.Cause(ctx), errRequestTimeout) {
		return nil
	}
	op := ""
	if graphql.HasOperationContext(ctx) {
		if oc := graphql.GetOperationContext(ctx); oc.Operation != nil {
			op = oc.Operation.Name
		}
	}
	if c, ok := ctx.Value(cutShortKey{}).(*cutShort); !ok || !c.note(log, err, path, op) {
		logTimedOut(ctx, log, 1, err, path, op)
	}
	return errTimeout
}

// unavailableRetryAfter is UNAVAILABLE's retryAfter (and Retry-After), in
// seconds: a deadlock is over by then, and a client retrying through a
// failover once a second costs little.
const unavailableRetryAfter = 1

// unavailable is the one rule for an error no code names, on every route:
// when err is a failure of the moment of a dependency (blobs.Transient:
// store.Transient's, the database unreachable, restarting, out of
// connections, a deadlock or serialization failure, and the blob store's,
// an answer 5xx or none; never a bucket missing or access denied), it logs
// err with the request id and attrs, and returns the UNAVAILABLE error shown
// in its place: at WARN while the request's client is there, at INFO once
// its context ended (the client went away, or a shutdown cut the request:
// the statement failed with the cancellation, no bug, and nobody but a
// client of a shutdown reads the answer, for whom UNAVAILABLE is the truth).
// For any other error it returns nil: a bug (INTERNAL, logged at ERROR).
func unavailable(ctx context.Context, log *slog.Logger, err error, attrs ...any) *errs.Error {
	if !blobs.Transient(err) {
		return nil
	}
	level, msg := slog.LevelWarn, "unavailable for the moment"
	if ctx.Err() != nil {
		level, msg = slog.LevelInfo, "the request ended before its answer (its client went away, or a shutdown)"
	}
	log.Log(ctx, level, msg, append([]any{"err", err, "request_id", reqinfo.From(ctx).RequestID}, attrs...)...)
	return &errs.Error{Code: errs.CodeUnavailable, Message: "the service is unavailable for the moment: retry",
		Extensions: map[string]any{"retryAfter": unavailableRetryAfter}}
}

// writeUnavailable answers a request outside GraphQL whose err is a failure
// of the moment (unavailable) with 503 UNAVAILABLE, Retry-After and
// extensions.retryAfter, and reports whether it did; it writes nothing for
// any other error.
func writeUnavailable(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) bool {
	e := unavailable(r.Context(), log, err, "path", r.URL.Path)
	if e == nil {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(unavailableRetryAfter))
	writeJSONError(w, http.StatusServiceUnavailable, e)
	return true
}

// writeUnknownError answers a request outside GraphQL whose err no code
// names: 503 UNAVAILABLE when it is a failure of the moment
// (writeUnavailable), else, a bug, logged at ERROR as msg with err, the
// request id and attrs, and answered 500 INTERNAL.
func writeUnknownError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error, msg string, attrs ...any) {
	if writeUnavailable(w, r, log, err) {
		return
	}
	log.ErrorContext(r.Context(), msg, append([]any{"err", err, "request_id", reqinfo.From(r.Context()).RequestID}, attrs...)...)
	writeExportJSONError(w, http.StatusInternalServerError, errs.CodeInternal, "internal error")
}

// internalError logs err with the request id and returns the INTERNAL error
// shown in its place, at gqlErr's path and locations.
func internalError(ctx context.Context, log *slog.Logger, err error, gqlErr *gqlerror.Error) *gqlerror.Error {
	log.ErrorContext(ctx, "internal error", "err", err, "request_id", reqinfo.From(ctx).RequestID,
		"path", gqlErr.Path.String())
	return &gqlerror.Error{
		Message:    "internal error",
		Path:       gqlErr.Path,
		Locations:  gqlErr.Locations,
		Extensions: map[string]any{"code": string(errs.CodeInternal)},
	}
}

// inputRefusedByPostgres is the safety net under the input checks: the
// BAD_USER_INPUT error of a value Postgres refused (store.InputError), logged
// as a warning because a check where input enters should have caught it; nil
// for any other error.
func inputRefusedByPostgres(ctx context.Context, log *slog.Logger, err error) *errs.Error {
	e, state := store.InputError(err)
	if e != nil {
		log.WarnContext(ctx, "bad input reached Postgres", "sqlstate", state, "err", err,
			"request_id", reqinfo.From(ctx).RequestID)
	}
	return e
}

// isArgumentError reports whether err was raised while coercing an argument of
// the field being resolved: gqlgen puts the argument's name (and the input
// fields below it) after the field's path, which a resolver error never has.
func isArgumentError(ctx context.Context, err *gqlerror.Error) bool {
	if !graphql.HasOperationContext(ctx) || graphql.GetFieldContext(ctx) == nil {
		return false
	}
	field := graphql.GetPath(ctx)
	if len(err.Path) <= len(field) {
		return false
	}
	for i := range field {
		if field[i] != err.Path[i] {
			return false
		}
	}
	_, named := err.Path[len(field)].(ast.PathName)
	return named
}

// recoverPanic turns a resolver panic into an internal error (logged by the presenter).
func recoverPanic(ctx context.Context, p any) error {
	return &panicError{value: p}
}

// panicError is a recovered panic.
type panicError struct{ value any }

// Error describes the panic for the log.
func (e *panicError) Error() string { return "panic: " + fmtAny(e.value) }
