package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// MaxWorkspacesPerUser is the most workspaces one account may belong to (as
// OWNER or in any other role): generous for a consultant in many client
// workspaces, small enough that me.workspaces, an unpaginated list, stays
// bounded. Creating a workspace and accepting an invitation refuse with
// CONFLICT at the cap; leaving a workspace frees a place. Postgres enforces
// it (migration 0013's trigger on members, which counts the user's
// memberships with the user's row locked), so it holds under concurrent
// mutations and across instances.
const MaxWorkspacesPerUser = 1000

// MaxMembersPerWorkspace is the most members one workspace may have (in any
// role, its OWNERs included). Workspace.members is a list without pages:
// 10,000 members are one read of 10,000 rows and about 1.5 MB of JSON with
// each member's user, which one request can still afford, and more than a
// demanding organisation puts in one workspace of tasks (a company-wide
// one of a firm of several thousand people fits). Beyond it a workspace is
// better split by team. Accepting an invitation refuses with CONFLICT at the
// cap, the invitation staying open; removing a member or leaving frees a
// place. Postgres enforces it (migration 0014's trigger on members, which
// counts the workspace's members with the workspace's row locked), so it
// holds under concurrent accepts and across instances. Open invitations are
// bounded apart (MaxOpenInvitations), not by this cap: an invitation to a
// full workspace may be accepted once a place is free.
const MaxMembersPerWorkspace = 10000

// workspaceColumns is the column list scanned by scanWorkspace: the workspace w
// and the viewer's membership v.
const workspaceColumns = `w.id, w.name, w.created_at, v.role`

// scanWorkspace scans the columns of workspaceColumns.
func scanWorkspace(row pgx.Row) (*Workspace, error) {
	var w Workspace
	if err := row.Scan(&w.ID, &w.Name, &w.CreatedAt, &w.ViewerRole); err != nil {
		return nil, err
	}
	return &w, nil
}

// WorkspacesByIDs returns the workspaces with these ids that viewerID is a member
// of, by id, each with the viewer's role. Other ids (unknown, malformed, or of a
// workspace the viewer is not in) are absent from the map.
func (db *DB) WorkspacesByIDs(ctx context.Context, viewerID string, ids []string) (map[string]*Workspace, error) {
	out := make(map[string]*Workspace, len(ids))
	cond, arg, n := anyID("w.id", 2, ids)
	if n == 0 || !validID(viewerID) {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+workspaceColumns+` FROM workspaces w
		JOIN members v ON v.workspace_id = w.id AND v.user_id = $1
		WHERE `+cond, viewerID, arg)
	if err != nil {
		return nil, fmt.Errorf("workspaces by ids: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, fmt.Errorf("workspaces by ids: %w", err)
		}
		out[w.ID] = w
	}
	return out, rows.Err()
}

// WorkspacesOfUsers returns, for each of userIDs, the workspaces that user shares
// with viewerID (for the viewer itself: all of the viewer's workspaces), newest
// first, each with the viewer's role. A user who shares none maps to nothing.
func (db *DB) WorkspacesOfUsers(ctx context.Context, viewerID string, userIDs []string) (map[string][]*Workspace, error) {
	out := make(map[string][]*Workspace, len(userIDs))
	cond, arg, n := anyID("m.user_id", 2, userIDs)
	if n == 0 || !validID(viewerID) {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT m.user_id, `+workspaceColumns+` FROM members m
		JOIN members v ON v.workspace_id = m.workspace_id AND v.user_id = $1
		JOIN workspaces w ON w.id = m.workspace_id
		WHERE `+cond+`
		ORDER BY w.created_at DESC, w.id DESC`, viewerID, arg)
	if err != nil {
		return nil, fmt.Errorf("workspaces of users: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var userID string
		var w Workspace
		if err := rows.Scan(&userID, &w.ID, &w.Name, &w.CreatedAt, &w.ViewerRole); err != nil {
			return nil, fmt.Errorf("workspaces of users: %w", err)
		}
		out[userID] = append(out[userID], &w)
	}
	return out, rows.Err()
}

// CreateWorkspace creates a workspace named name with actor as its OWNER and
// records workspace.created. It returns UNAUTHENTICATED for no actor and
// BAD_USER_INPUT for an empty or over-long name.
func (db *DB) CreateWorkspace(ctx context.Context, actor *User, name string) (*Workspace, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	name, err := cleanName("name", name, MaxNameLength)
	if err != nil {
		return nil, err
	}
	var ws *Workspace
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		// One round trip with the commit: the workspace, its owner and the event.
		w := Workspace{ID: newID(), Name: name, CreatedAt: stamp(time.Now()), ViewerRole: RoleOwner}
		if err := db.exec(ctx, tx, "insert workspace", `INSERT INTO workspaces (id, name, created_at)
			SELECT $1, $2, $3 WHERE taskflow_ok()`, []any{w.ID, w.Name, w.CreatedAt}, 1); err != nil {
			return err
		}
		if err := db.exec(ctx, tx, "insert owner", `INSERT INTO members (workspace_id, user_id, role, joined_at)
			SELECT $1, $2, 'OWNER', $3 WHERE taskflow_ok()`, []any{w.ID, actor.ID, w.CreatedAt}, 1); err != nil {
			return err
		}
		meta := audit.Snapshot(&w)
		meta["ownerId"] = actor.ID
		if err := db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &w.ID, ActorID: &actor.ID,
			Action: "workspace.created", EntityID: w.ID, Metadata: meta}); err != nil {
			return err
		}
		ws = &w
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ws, nil
}
