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
// workspaces, small enough that me.workspaces, the deprecated list without
// pages, stays bounded, and that a page of workspacesConnection sorts at
// most this many memberships (WorkspaceLists). Creating a workspace and
// accepting an invitation refuse with CONFLICT at the cap; leaving a
// workspace frees a place. Postgres enforces it (migration 0013's trigger on
// members, which counts the user's memberships with the user's row locked,
// and 0017's on an UPDATE that gives a membership to another user), so it
// holds under concurrent mutations, across instances and for an operator's
// SQL.
const MaxWorkspacesPerUser = 1000

// MaxMembersPerWorkspace is the most members one workspace may have (in any
// role, its OWNERs included). Workspace.members, the deprecated list
// without pages (membersConnection pages it: MemberLists), reads them all:
// 10,000 members are one read of 10,000 rows and about 1.5 MB of JSON with
// each member's user, which one request can still afford, and more than a
// demanding organisation puts in one workspace of tasks (a company-wide
// one of a firm of several thousand people fits). Beyond it a workspace is
// better split by team. Accepting an invitation refuses with CONFLICT at the
// cap, the invitation staying open; removing a member or leaving frees a
// place. Postgres enforces it (migration 0014's trigger on members, which
// counts the workspace's members with the workspace's row locked, and
// 0017's on an UPDATE that moves a membership into another workspace), so
// it holds under concurrent accepts, across instances and for an operator's
// SQL. Open invitations are
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
// first (by created_at, then id), each with the viewer's role: the deprecated
// User.workspaces (WorkspaceLists pages them). A user who shares none maps to
// nothing.
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

// WorkspacesScope is the cursor scope of a user's workspace list: a cursor of
// one user's workspaces is refused by any other list.
func WorkspacesScope(userID string) string {
	return "workspaces:" + userID
}

// WorkspaceList asks for one page of a user's workspaces (see WorkspaceLists).
type WorkspaceList struct {
	UserID string
	// Page must come from NewPage with WorkspacesScope(UserID).
	Page Page
}

// workspaceKey is a workspace's position in a list: (created_at, id).
func workspaceKey(w *Workspace) (time.Time, string) { return w.CreatedAt, w.ID }

// WorkspaceLists returns a page of each list's user's workspaces that viewerID
// can see, by WorkspacesOfUsers' rule (all of the viewer's own on the viewer,
// the ones the user shares with the viewer on anyone else), newest first by
// (created_at, id) as WorkspacesOfUsers lists them, each with the viewer's
// role, in one statement and in the order of lists. The order is the
// workspace's, not the membership's, so a page sorts the user's memberships
// (at most MaxWorkspacesPerUser) rather than reading an index from its
// cursor. A list of a user who shares nothing with the viewer, does not
// exist or has a malformed id gets an empty page, as does every list of no
// viewer. It returns an error only when the database fails.
func (db *DB) WorkspaceLists(ctx context.Context, viewerID string, lists []WorkspaceList) ([]*WorkspaceConnection, error) {
	items := make([][]*Workspace, len(lists))
	var (
		ord   []int // the index in lists of each list asked for, in the statement's order
		users []string
		at    []time.Time
		after []string
		limit []int32
	)
	for i, l := range lists {
		if !validID(l.UserID) || !validID(viewerID) {
			continue
		}
		ord = append(ord, i)
		users = append(users, l.UserID)
		limit = append(limit, int32(l.Page.First+1))
		if c := l.Page.After; c != nil {
			at, after = append(at, c.At), append(after, c.ID)
		} else {
			at, after = append(at, endOfTime), append(after, lastID)
		}
	}
	if len(ord) > 0 {
		var rows pgx.Rows
		var err error
		if len(ord) == 1 {
			// One page (me { workspacesConnection }): scalar parameters, which
			// Postgres plans once (docs/decisions/2026-12-01-one-key-one-plan.md).
			rows, err = db.q(ctx).Query(ctx, `SELECT 1::bigint, `+workspaceColumns+` FROM members m
				JOIN members v ON v.workspace_id = m.workspace_id AND v.user_id = $1
				JOIN workspaces w ON w.id = m.workspace_id
				WHERE m.user_id = $2::uuid AND (w.created_at, w.id) < ($3::timestamptz, $4::uuid)
				ORDER BY w.created_at DESC, w.id DESC LIMIT $5::int`, viewerID, users[0], at[0], after[0], limit[0])
		} else {
			rows, err = db.q(ctx).Query(ctx, `SELECT k.ord, w.id, w.name, w.created_at, w.role
				FROM unnest($2::text[]::uuid[], $3::timestamptz[], $4::text[]::uuid[], $5::int[])
					WITH ORDINALITY AS k(uid, at, wid, lim, ord)
				CROSS JOIN LATERAL (SELECT `+workspaceColumns+` FROM members m
					JOIN members v ON v.workspace_id = m.workspace_id AND v.user_id = $1
					JOIN workspaces w ON w.id = m.workspace_id
					WHERE m.user_id = k.uid AND (w.created_at, w.id) < (k.at, k.wid)
					ORDER BY w.created_at DESC, w.id DESC LIMIT k.lim) w
				ORDER BY k.ord, w.created_at DESC, w.id DESC`, viewerID, users, at, after, limit)
		}
		if err != nil {
			return nil, fmt.Errorf("workspace lists: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k int64
			var w Workspace
			if err := rows.Scan(&k, &w.ID, &w.Name, &w.CreatedAt, &w.ViewerRole); err != nil {
				return nil, fmt.Errorf("workspace lists: %w", err)
			}
			i := ord[k-1]
			if items[i] == nil {
				items[i] = make([]*Workspace, 0, lists[i].Page.First+1) // a page has at most its limit of rows
			}
			items[i] = append(items[i], &w)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("workspace lists: %w", err)
		}
	}
	out := make([]*WorkspaceConnection, len(lists))
	for i, l := range lists {
		out[i] = connection(items[i], l.Page, WorkspacesScope(l.UserID), workspaceKey)
	}
	return out, nil
}

// CreateWorkspace creates a workspace named name with actor as its OWNER and
// records workspace.created. It returns UNAUTHENTICATED for no actor and
// BAD_USER_INPUT for an empty or over-long name or one holding a character a
// name may not (cleanName).
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
