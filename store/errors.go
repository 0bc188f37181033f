package store

import (
	"context"
	"errors"
	"io"
	"net"
	"os"

	"github.com/jackc/pgx/v5/pgconn"

	"taskflow/errs"
)

// Domain errors of accounts and tokens.
var (
	// ErrBadCredentials is returned by Login for an unknown e-mail and a wrong password alike.
	ErrBadCredentials = errs.Errorf(errs.CodeUnauthenticated, "invalid e-mail or password")
	// ErrInvalidToken is returned for a bearer token that is unknown, expired or revoked.
	ErrInvalidToken = errs.Errorf(errs.CodeUnauthenticated, "invalid, expired or revoked token")
)

// notFound returns a NOT_FOUND error for the named kind of thing.
func notFound(kind string) *errs.Error { return errs.Errorf(errs.CodeNotFound, "%s not found", kind) }

// forbidden returns a FORBIDDEN error explaining which role is needed.
func forbidden(action string) *errs.Error {
	return errs.Errorf(errs.CodeForbidden, "your role does not allow you to %s", action)
}

// constraintErrors maps Postgres constraint names to the domain errors they mean.
var constraintErrors = map[string]*errs.Error{
	"users_email_key": errs.Errorf(errs.CodeConflict, "an account with this e-mail already exists"),
	"members_pkey":    errs.Errorf(errs.CodeConflict, "the user is already a member of this workspace"),
	"invitations_workspace_email_key": errs.Errorf(errs.CodeConflict,
		"an invitation of this e-mail to the workspace is open already: revoke it first to invite with another role"),
	"tasks_assignee_member_fkey": errs.Errorf(errs.CodeBadUserInput, "the assignee must be a member of the workspace"),
	// Raised by migration 0013's trigger when a membership would take its
	// user past MaxWorkspacesPerUser: createWorkspace and acceptInvitation
	// insert the actor's own membership.
	"members_per_user_cap": errs.Errorf(errs.CodeConflict,
		"you belong to %d workspaces, the most one account may: leave one before you create or join another",
		MaxWorkspacesPerUser),
	// Raised by migration 0014's trigger when memberships would take a
	// workspace past MaxMembersPerWorkspace: acceptInvitation inserts the
	// actor's membership in another's workspace.
	"members_per_workspace_cap": errs.Errorf(errs.CodeConflict,
		"the workspace has %d members, the most one workspace may: a member must leave or be removed before anyone else joins",
		MaxMembersPerWorkspace),
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

// Messages of the Postgres errors that only a client's value can cause.
var (
	errBadCharacter = errs.Errorf(errs.CodeBadUserInput,
		"a text value contains a character that cannot be stored (NUL or invalid UTF-8)")
	errValueRefused = errs.Errorf(errs.CodeBadUserInput,
		"a value is malformed, out of range or too large to be stored")
)

// inputStates are the SQLSTATEs with which Postgres refuses a value it was
// given, rather than a statement: what a client's argument can cause and a bug
// in the statement cannot. Division by zero and the like (also class 22) are
// not here: they are bugs.
var inputStates = map[string]*errs.Error{
	"22021": errBadCharacter, // character_not_in_repertoire: NUL or invalid UTF-8 in text
	"22P05": errBadCharacter, // untranslatable_character: \u0000 in jsonb
	"22P02": errValueRefused, // invalid_text_representation: e.g. not a uuid
	"22001": errValueRefused, // string_data_right_truncation
	"22003": errValueRefused, // numeric_value_out_of_range
	"22007": errValueRefused, // invalid_datetime_format
	"22008": errValueRefused, // datetime_field_overflow: a time Postgres cannot hold
	"22025": errValueRefused, // invalid_escape_sequence: a LIKE pattern
	"54000": errValueRefused, // program_limit_exceeded: index row or tsvector too large
}

// InputError is the safety net under the checks where input enters: when err
// is Postgres refusing a value (a bad character, a malformed or out-of-range
// value, a value too large to store) it returns the BAD_USER_INPUT error that
// means, and the SQLSTATE; for any other error, nil and "". The statement
// failed, so its transaction commits nothing. The HTTP layer calls it before
// it would answer INTERNAL; reaching it means a check at the entry is missing,
// so it is worth a log line.
func InputError(err error) (*errs.Error, string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if e, ok := inputStates[pgErr.Code]; ok {
			return e, pgErr.Code
		}
	}
	return nil, ""
}

// Transient reports whether err is a failure of the moment rather than of
// the statement: Postgres refusing it for a conflict with other transactions
// (class 40: serialization failure, deadlock; 55P03: a lock not available),
// for want of resources (class 53: too many connections, out of memory or
// disk), or because the server or an operator stopped it (class 57: query
// canceled, statement timeout, shutdown), a failed connection (class 08, or
// an error below Postgres's answer: network, EOF, a connection refused), or
// the caller's context ending. The same statement may succeed shortly. Any
// other error (a refused value, a constraint, a bug in the statement, a
// scan) is not.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:min(len(pgErr.Code), 2)] {
		case "08", "40", "53", "57":
			return true
		}
		return pgErr.Code == "55P03"
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.As(err, &connectErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Canceled reports whether err is a statement, or a wait for a connection,
// cut short because its context ended: the context's error, pgconn's
// timeout (the connection's deadline set as the context ended), or
// Postgres's query_canceled (57014), which the cancel request of a context
// ending brings (CancelStatements). Each is also Transient.
func Canceled(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57014"
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}
