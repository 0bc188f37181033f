package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// MembersByWorkspaces returns the members of each of workspaceIDs that viewerID is
// a member of, newest first (by joined_at, then user id). Workspaces the viewer is
// not in map to nothing.
func (db *DB) MembersByWorkspaces(ctx context.Context, viewerID string, workspaceIDs []string) (map[string][]*Member, error) {
	out := make(map[string][]*Member, len(workspaceIDs))
	cond, arg, n := anyID("m.workspace_id", 2, workspaceIDs)
	if n == 0 || !validID(viewerID) {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT m.workspace_id, m.user_id, m.role, m.joined_at FROM members m
		JOIN members v ON v.workspace_id = m.workspace_id AND v.user_id = $1
		WHERE `+cond+`
		ORDER BY m.joined_at DESC, m.user_id DESC`, viewerID, arg)
	if err != nil {
		return nil, fmt.Errorf("members by workspaces: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m Member
		if err := rows.Scan(&m.WorkspaceID, &m.UserID, &m.Role, &m.JoinedAt); err != nil {
			return nil, fmt.Errorf("members by workspaces: %w", err)
		}
		out[m.WorkspaceID] = append(out[m.WorkspaceID], &m)
	}
	return out, rows.Err()
}

// lockWorkspace locks the workspace row for the rest of tx, serialising every
// membership change of the workspace (so two concurrent demotions cannot both see
// another OWNER left). It returns NOT_FOUND if the workspace does not exist.
func lockWorkspace(ctx context.Context, tx Querier, workspaceID string) error {
	if !validID(workspaceID) {
		return notFound("workspace")
	}
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM workspaces WHERE id = $1 FOR NO KEY UPDATE`, workspaceID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("workspace")
	}
	if err != nil {
		return fmt.Errorf("lock workspace: %w", err)
	}
	return nil
}

// memberFor returns the membership of userID in the workspace, or NOT_FOUND.
func memberFor(ctx context.Context, tx Querier, workspaceID, userID string) (*Member, error) {
	if !validID(userID) {
		return nil, notFound("member")
	}
	var m Member
	err := tx.QueryRow(ctx, `SELECT workspace_id, user_id, role, joined_at FROM members
		WHERE workspace_id = $1 AND user_id = $2`, workspaceID, userID).Scan(&m.WorkspaceID, &m.UserID, &m.Role, &m.JoinedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("member")
	}
	if err != nil {
		return nil, fmt.Errorf("member: %w", err)
	}
	return &m, nil
}

// ownerCount returns how many OWNERs the workspace has.
func ownerCount(ctx context.Context, tx Querier, workspaceID string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM members WHERE workspace_id = $1 AND role = 'OWNER'`, workspaceID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count owners: %w", err)
	}
	return n, nil
}

// errLastOwner is returned when a change would leave a workspace without an OWNER.
var errLastOwner = errs.Errorf(errs.CodeConflict, "the last OWNER of a workspace cannot be removed or demoted")

// errOwnerOnly is returned when a non-OWNER tries to make or unmake an OWNER.
var errOwnerOnly = errs.Errorf(errs.CodeForbidden, "only an OWNER can make or unmake an OWNER")

// UpdateMemberRole changes a member's role and records member.role_changed with
// metadata.changes.role; setting the role a member already has changes nothing
// and records nothing. The actor must be an OWNER or ADMIN, and an OWNER when the
// member is or becomes an OWNER. It returns UNAUTHENTICATED for no actor,
// NOT_FOUND if the actor or the user is not a member of the workspace, FORBIDDEN
// for a weaker role, BAD_USER_INPUT for an unknown role, and CONFLICT when it
// would demote the last OWNER.
func (db *DB) UpdateMemberRole(ctx context.Context, actor *User, workspaceID, userID string, role Role) (*Member, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !role.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "role: not a valid role")
	}
	var out *Member
	err := db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		if err := lockWorkspace(ctx, tx, workspaceID); err != nil {
			return err
		}
		actorRole, err := db.requireRole(ctx, workspaceID, actor, RoleAdmin, "workspace", "manage members")
		if err != nil {
			return err
		}
		before, err := memberFor(ctx, tx, workspaceID, userID)
		if err != nil {
			return err
		}
		if (before.Role == RoleOwner || role == RoleOwner) && actorRole != RoleOwner {
			return errOwnerOnly
		}
		if before.Role == role {
			out = before
			return nil
		}
		if before.Role == RoleOwner {
			n, err := ownerCount(ctx, tx, workspaceID)
			if err != nil {
				return err
			}
			if n <= 1 {
				return errLastOwner
			}
		}
		if err := db.exec(ctx, tx, "update member role", `UPDATE members SET role = $3
			WHERE workspace_id = $1 AND user_id = $2 AND taskflow_ok()`, []any{workspaceID, before.UserID, role}, 1); err != nil {
			return err
		}
		after := *before
		after.Role = role
		if err := db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &workspaceID, ActorID: &actor.ID,
			Action: "member.role_changed", EntityID: before.UserID,
			Metadata: map[string]any{"changes": audit.Changes(before, &after)}}); err != nil {
			return err
		}
		out = &after
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveMember removes a user from the workspace and records member.removed; the
// user's tasks in the workspace become unassigned. Any member may remove
// themselves (leave); removing someone else needs an OWNER or ADMIN, and an OWNER
// to remove an OWNER. It returns UNAUTHENTICATED for no actor, NOT_FOUND if the
// actor or the user is not a member, FORBIDDEN for a weaker role, and CONFLICT
// when it would remove the last OWNER.
func (db *DB) RemoveMember(ctx context.Context, actor *User, workspaceID, userID string) error {
	if actor == nil {
		return errs.ErrUnauthenticated
	}
	return db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		if err := lockWorkspace(ctx, tx, workspaceID); err != nil {
			return err
		}
		actorRole, err := db.requireRole(ctx, workspaceID, actor, RoleViewer, "workspace", "manage members")
		if err != nil {
			return err
		}
		self := userID == actor.ID
		if !self && !actorRole.AtLeast(RoleAdmin) {
			return forbidden("manage members")
		}
		m, err := memberFor(ctx, tx, workspaceID, userID)
		if err != nil {
			return err
		}
		if m.Role == RoleOwner {
			if actorRole != RoleOwner {
				return errOwnerOnly
			}
			n, err := ownerCount(ctx, tx, workspaceID)
			if err != nil {
				return err
			}
			if n <= 1 {
				return errLastOwner
			}
		}
		var unassigned int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE workspace_id = $1 AND assignee_id = $2`,
			workspaceID, m.UserID).Scan(&unassigned); err != nil {
			return fmt.Errorf("count assigned tasks: %w", err)
		}
		if err := db.exec(ctx, tx, "remove member", `DELETE FROM members WHERE workspace_id = $1 AND user_id = $2
			AND taskflow_ok()`, []any{workspaceID, m.UserID}, 1); err != nil {
			return err
		}
		meta := audit.Snapshot(m)
		meta["unassignedTasks"] = unassigned
		return db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &workspaceID, ActorID: &actor.ID,
			Action: "member.removed", EntityID: m.UserID, Metadata: meta})
	})
}
