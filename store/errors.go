package store

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Code is a machine-readable error class, shown to clients as extensions.code.
type Code string

// The error vocabulary of the API contract.
const (
	CodeUnauthenticated       Code = "UNAUTHENTICATED"
	CodeForbidden             Code = "FORBIDDEN"
	CodeNotFound              Code = "NOT_FOUND"
	CodeBadUserInput          Code = "BAD_USER_INPUT"
	CodeConflict              Code = "CONFLICT"
	CodeIdempotencyKeyReused  Code = "IDEMPOTENCY_KEY_REUSED"
	CodeIdempotencyInProgress Code = "IDEMPOTENCY_IN_PROGRESS"
	CodeRateLimited           Code = "RATE_LIMITED"
	CodeQueryTooCostly        Code = "QUERY_TOO_COSTLY"
	CodeInternal              Code = "INTERNAL"
)

// Error is a domain error that is safe to show to a client: its Message is written
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

// ErrorCode returns the code of the first *Error in err's chain, CodeInternal for
// any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Common domain errors.
var (
	// ErrUnauthenticated is returned when an operation needs a signed-in user.
	ErrUnauthenticated = Errorf(CodeUnauthenticated, "authentication required")
	// ErrBadCredentials is returned by Login for an unknown e-mail and a wrong password alike.
	ErrBadCredentials = Errorf(CodeUnauthenticated, "invalid e-mail or password")
	// ErrInvalidToken is returned for a bearer token that is unknown, expired or revoked.
	ErrInvalidToken = Errorf(CodeUnauthenticated, "invalid, expired or revoked token")
)

// notFound returns a NOT_FOUND error for the named kind of thing.
func notFound(kind string) *Error { return Errorf(CodeNotFound, "%s not found", kind) }

// forbidden returns a FORBIDDEN error explaining which role is needed.
func forbidden(action string) *Error {
	return Errorf(CodeForbidden, "your role does not allow you to %s", action)
}

// constraintErrors maps Postgres constraint names to the domain errors they mean.
var constraintErrors = map[string]*Error{
	"users_email_key":            Errorf(CodeConflict, "an account with this e-mail already exists"),
	"members_pkey":               Errorf(CodeConflict, "the user is already a member of this workspace"),
	"tasks_assignee_member_fkey": Errorf(CodeBadUserInput, "the assignee must be a member of the workspace"),
}

// mapError turns Postgres constraint violations into domain errors by constraint
// name, and leaves every other error as it is.
func mapError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName != "" {
		if e, ok := constraintErrors[pgErr.ConstraintName]; ok {
			return e
		}
	}
	return err
}
