// Package errs is TaskFlow's error vocabulary: the codes a client sees in
// extensions.code and the one error type that carries them. It is a leaf
// package (it imports only the standard library), so every mechanism (store,
// rate limits, idempotency, transports) names the same codes without importing
// any other of them. The contract's table of codes is docs/api.md#errors.
package errs

import (
	"errors"
	"fmt"
)

// Code is a machine-readable error class, shown to clients as extensions.code.
type Code string

// The codes of the API contract (docs/api.md#errors).
const (
	// CodeUnauthenticated: no valid token where one is needed, or a bad login.
	CodeUnauthenticated Code = "UNAUTHENTICATED"
	// CodeForbidden: a member whose role does not allow the action.
	CodeForbidden Code = "FORBIDDEN"
	// CodeNotFound: the thing does not exist or is not visible to the caller.
	CodeNotFound Code = "NOT_FOUND"
	// CodeBadUserInput: invalid arguments.
	CodeBadUserInput Code = "BAD_USER_INPUT"
	// CodeConflict: the state of the data refuses the change.
	CodeConflict Code = "CONFLICT"
	// CodeIdempotencyKeyReused: the key was used for another call.
	CodeIdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED"
	// CodeIdempotencyInProgress: a call with the same key is still running.
	CodeIdempotencyInProgress Code = "IDEMPOTENCY_IN_PROGRESS"
	// CodeRateLimited: over a budget; HTTP 429 with Retry-After.
	CodeRateLimited Code = "RATE_LIMITED"
	// CodeQueryTooCostly: one operation is over a per-operation bound.
	CodeQueryTooCostly Code = "QUERY_TOO_COSTLY"
	// CodeGraphQLParseFailed: the body or the document cannot be parsed (the
	// value of gqlgen's errcode.ParseFailed).
	CodeGraphQLParseFailed Code = "GRAPHQL_PARSE_FAILED"
	// CodeGraphQLValidationFailed: the document is not valid against the
	// schema (the value of gqlgen's errcode.ValidationFailed).
	CodeGraphQLValidationFailed Code = "GRAPHQL_VALIDATION_FAILED"
	// CodePersistedQueryNotFound: an automatic persisted query's hash is not
	// known; the client sends the text with it (the code Apollo clients expect).
	CodePersistedQueryNotFound Code = "PERSISTED_QUERY_NOT_FOUND"
	// CodeStreamInterrupted: a subscription ended, or could not start, for a
	// reason of the server's (it is restarting, at its connection cap, it
	// could not read the log); subscribe again with the last cursor received
	// (extensions.cursor), nothing is lost.
	CodeStreamInterrupted Code = "STREAM_INTERRUPTED"
	// CodeUnavailable: the server could not complete the operation because a
	// dependency failed for the moment (the database unreachable, restarting,
	// out of connections, a deadlock or serialization failure); retry after
	// extensions.retryAfter with the same idempotency key. Nothing was
	// committed, unless the failure came during the commit itself, whose
	// outcome is then unknown: the key makes the retry safe either way.
	CodeUnavailable Code = "UNAVAILABLE"
	// CodeTimeout: the operation ran past the server's time bound
	// (REQUEST_TIMEOUT) and was stopped, its statements cancelled in
	// Postgres; nothing of the field that reports it was committed. Retry
	// with the same idempotency key (a lock held elsewhere may be gone by
	// then), or ask for less. Queries and mutations are bounded on every
	// transport; subscriptions are not.
	CodeTimeout Code = "TIMEOUT"
	// CodeInternal: a bug; the message says nothing of internals.
	CodeInternal Code = "INTERNAL"
)

// all lists every code of the contract, in the order docs/api.md gives them.
var all = []Code{
	CodeUnauthenticated, CodeForbidden, CodeNotFound, CodeBadUserInput, CodeConflict,
	CodeIdempotencyKeyReused, CodeIdempotencyInProgress, CodeRateLimited, CodeQueryTooCostly,
	CodeGraphQLParseFailed, CodeGraphQLValidationFailed, CodePersistedQueryNotFound, CodeStreamInterrupted,
	CodeUnavailable, CodeTimeout, CodeInternal,
}

// All returns every code of the contract. The error presenter emits no other:
// an error with any other code is shown as INTERNAL.
func All() []Code { return append([]Code(nil), all...) }

// Known reports whether code is one of All.
func Known(code string) bool {
	for _, c := range all {
		if string(c) == code {
			return true
		}
	}
	return false
}

// Error is an error that is safe to show to a client: its Message is written
// for the caller and Extensions are added to the GraphQL error's extensions.
type Error struct {
	Code       Code
	Message    string
	Extensions map[string]any
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, CodeInternal for
// any other non-nil error, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrUnauthenticated is returned when an operation needs a signed-in user.
var ErrUnauthenticated = Errorf(CodeUnauthenticated, "authentication required")
