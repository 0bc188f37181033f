package store

import (
	"context"
	"errors"
	"fmt"

	"taskflow/errs"

	"github.com/jackc/pgx/v5"
)

// RoleIn returns user's role in the workspace, or a NOT_FOUND error (kind names
// the thing asked for) if the workspace does not exist or the user is not a member:
// a non-member must not learn that it exists.
func (db *DB) RoleIn(ctx context.Context, workspaceID, userID, kind string) (Role, error) {
	if !validID(workspaceID) {
		return "", notFound(kind)
	}
	return scanRole(db.q(ctx).QueryRow(ctx, roleInSQL, workspaceID, userID), kind)
}

// roleInSQL is RoleIn's statement: the role of the user $2 in the workspace $1.
const roleInSQL = `SELECT role FROM members WHERE workspace_id = $1 AND user_id = $2`

// scanRole reads the row of roleInSQL: the role, or NOT_FOUND (naming kind)
// for no row.
func scanRole(row pgx.Row, kind string) (Role, error) {
	var r Role
	err := row.Scan(&r)
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
		return "", errs.ErrUnauthenticated
	}
	r, err := db.RoleIn(ctx, workspaceID, user.ID, kind)
	if err != nil {
		return "", err
	}
	return checkRole(&r, min, kind, action)
}

// checkRole is requireRole for a role read already, in the statement that read
// the thing it guards (joinRole): NOT_FOUND if role is nil (not a member),
// FORBIDDEN (naming action) if it is below min.
func checkRole(role *Role, min Role, kind, action string) (Role, error) {
	if role == nil {
		return "", notFound(kind)
	}
	if !role.AtLeast(min) {
		return *role, forbidden(action)
	}
	return *role, nil
}

// joinRole joins a row (aliased alias, with a workspace_id) to the role in its
// workspace of the user whose id is the statement's parameter param, as the
// column m.role (NULL for a non-member): the read of a row and the role check
// that guards it go in one round trip.
func joinRole(alias, param string) string {
	return ` LEFT JOIN members m ON m.workspace_id = ` + alias + `.workspace_id AND m.user_id = ` + param
}

// CheckReplayAccess returns NOT_FOUND when res, the stored result of a
// mutation replayed for viewerID, is a task, comment, project or attachment
// of a workspace viewerID is no longer a member of, and nil for any other
// result. The fields under a replayed result are read fresh, and some of
// them without an access check of their own (a task's comments and
// attachments, a comment's or an attachment's task, a project's tasks): a
// member removed since the first call must not read the workspace through
// them.
func (db *DB) CheckReplayAccess(ctx context.Context, viewerID string, res any) error {
	var ws, kind string
	switch v := res.(type) {
	case *Task:
		if v != nil {
			ws, kind = v.WorkspaceID, "task"
		}
	case *Comment:
		if v != nil {
			ws, kind = v.WorkspaceID, "comment"
		}
	case *Project:
		if v != nil {
			ws, kind = v.WorkspaceID, "project"
		}
	case *Attachment:
		if v != nil {
			ws, kind = v.WorkspaceID, "attachment"
		}
	}
	if kind == "" {
		return nil
	}
	_, err := db.RoleIn(ctx, ws, viewerID, kind)
	return err
}
