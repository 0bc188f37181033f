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

// CheckReplayAccess answers whether viewerID may be given res, the stored
// result of a mutation it made and now repeats with the same idempotency
// key: only if it could read that result now, at the role reading it needs.
// It returns NOT_FOUND (naming the kind of result) when viewerID is no
// longer a member of the result's workspace, FORBIDDEN (naming what the role
// does not allow) when its role is now below the one that reads the result,
// and nil otherwise, in one statement (RoleIn's) for a result of a
// workspace, none for the others (a Boolean). A replayed *Workspace gets
// viewerID's present role as its ViewerRole, read by that statement: the
// field is the viewer's, not the result's, and every other read of the
// workspace shows it as it is now. The rules are the reads':
//
//   - a task, comment, project or attachment, a workspace (createWorkspace,
//     acceptInvitation) and a membership (updateMemberRole, addMember): a
//     member of any role, as Workspace.members and the workspace's reads;
//   - an invitation (inviteMember): OWNER or ADMIN, as Workspace.invitations;
//   - a webhook endpoint, with or without its secret (createWebhookEndpoint,
//     rotateWebhookSecret, updateWebhookEndpoint and the like), and a
//     delivery (redeliverWebhook): OWNER or ADMIN, as webhookEndpoint;
//   - an audit export (startAuditExport): OWNER or ADMIN, as auditExport.
//
// The fields under a replayed result are read fresh, and some of them
// without an access check of their own (a task's comments and attachments,
// a comment's or an attachment's task, a project's tasks, a member's user,
// an invitation's invitedBy): a member removed since the first call must
// not read the workspace through them, nor an ADMIN demoted since read a
// signing secret again or a delivery's payload.
func (db *DB) CheckReplayAccess(ctx context.Context, viewerID string, res any) error {
	var ws, kind, action string
	need := RoleViewer
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
	case *Workspace:
		if v != nil {
			ws, kind = v.ID, "workspace"
		}
	case *Member:
		if v != nil {
			ws, kind = v.WorkspaceID, "workspace"
		}
	case *Invitation:
		if v != nil {
			ws, kind, need, action = v.WorkspaceID, "invitation", RoleAdmin, invitationsReadAction
		}
	case *WebhookEndpoint:
		if v != nil {
			ws, kind, need, action = v.WorkspaceID, "webhook endpoint", RoleAdmin, webhookReadAction
		}
	case *WebhookEndpointSecret:
		if v != nil && v.Endpoint != nil {
			ws, kind, need, action = v.Endpoint.WorkspaceID, "webhook endpoint", RoleAdmin, webhookReadAction
		}
	case *WebhookDelivery:
		if v != nil {
			ws, kind, need, action = v.WorkspaceID, "webhook delivery", RoleAdmin, webhookReadAction
		}
	case *AuditExport:
		if v != nil {
			ws, kind, need, action = v.WorkspaceID, "audit export", RoleAdmin, auditReadAction
		}
	}
	if kind == "" {
		return nil
	}
	role, err := db.RoleIn(ctx, ws, viewerID, kind)
	if err != nil {
		return err
	}
	if _, err = checkRole(&role, need, kind, action); err != nil {
		return err
	}
	if w, ok := res.(*Workspace); ok {
		w.ViewerRole = role
	}
	return nil
}
