package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RoleIn returns user's role in the workspace, or a NOT_FOUND error (kind names
// the thing asked for) if the workspace does not exist or the user is not a member:
// a non-member must not learn that it exists.
func (db *DB) RoleIn(ctx context.Context, workspaceID, userID, kind string) (Role, error) {
	if !validID(workspaceID) {
		return "", notFound(kind)
	}
	var r Role
	err := db.q(ctx).QueryRow(ctx, `SELECT role FROM members WHERE workspace_id = $1 AND user_id = $2`,
		workspaceID, userID).Scan(&r)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound(kind)
	}
	if err != nil {
		return "", fmt.Errorf("role in workspace: %w", err)
	}
	return r, nil
}

// requireRole returns the user's role if it is at least min; NOT_FOUND if the user
// is not a member, FORBIDDEN (naming action) if the role is too weak.
func (db *DB) requireRole(ctx context.Context, workspaceID string, user *User, min Role, kind, action string) (Role, error) {
	if user == nil {
		return "", ErrUnauthenticated
	}
	r, err := db.RoleIn(ctx, workspaceID, user.ID, kind)
	if err != nil {
		return "", err
	}
	if !r.AtLeast(min) {
		return r, forbidden(action)
	}
	return r, nil
}
