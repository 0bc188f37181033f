package store

import (
	"errors"

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
