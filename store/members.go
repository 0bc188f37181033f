package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"taskflow/errs"
)

// MembersByWorkspaces returns the members of each of workspaceIDs that viewerID is
// a member of, newest first (by joined_at, then user id): the deprecated
// Workspace.members (MemberLists pages them). Workspaces the viewer is not in
// map to nothing.
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

// MembersScope is the cursor scope of a workspace's member list: a cursor of
// one workspace's members is refused by any other list.
func MembersScope(workspaceID string) string {
	return "members:" + workspaceID
}

// MemberList asks for one page of a workspace's members (see MemberLists).
type MemberList struct {
	WorkspaceID string
	// Page must come from NewPage with MembersScope(WorkspaceID).
	Page Page
}

// memberKey is a member's position in its workspace's list: (joined_at, user id).
func memberKey(m *Member) (time.Time, string) { return m.JoinedAt, m.UserID }

// MemberLists returns a page of each list's workspace's members, newest first
// by (joined_at, user id) as MembersByWorkspaces lists them, in one statement
// and in the order of lists. Each page is a keyset read of members_page_idx
// from its cursor, so a page costs the same wherever it is in a list of
// MaxMembersPerWorkspace. A list whose workspace viewerID is not a member of
// (or that does not exist, or whose id is malformed) gets a nil page; a
// member's page past the end is empty. It returns an error only when the
// database fails.
func (db *DB) MemberLists(ctx context.Context, viewerID string, lists []MemberList) ([]*MemberConnection, error) {
	out := make([]*MemberConnection, len(lists))
	if len(lists) == 0 || !validID(viewerID) {
		return out, nil
	}
	var (
		ord   []int // the index in lists of each list asked for, in the statement's order
		ws    []string
		at    []time.Time
		after []string
		limit []int32
	)
	for i, l := range lists {
		if !validID(l.WorkspaceID) {
			continue
		}
		ord = append(ord, i)
		ws = append(ws, l.WorkspaceID)
		limit = append(limit, int32(l.Page.First+1))
		if c := l.Page.After; c != nil {
			at, after = append(at, c.At), append(after, c.ID)
		} else {
			at, after = append(at, endOfTime), append(after, lastID)
		}
	}
	var rows pgx.Rows
	var err error
	switch len(ord) {
	case 0:
		return out, nil
	case 1:
		// One page (workspace(id) { membersConnection }): scalar parameters,
		// which Postgres plans once (docs/decisions/2026-12-01-one-key-one-plan.md).
		rows, err = db.q(ctx).Query(ctx, `SELECT 1::bigint, v.workspace_id, m.user_id, m.role, m.joined_at FROM members v
			LEFT JOIN LATERAL (SELECT m.user_id, m.role, m.joined_at FROM members m
				WHERE m.workspace_id = $2::uuid AND (m.joined_at, m.user_id) < ($3::timestamptz, $4::uuid)
				ORDER BY m.joined_at DESC, m.user_id DESC LIMIT $5::int) m ON true
			WHERE v.workspace_id = $2::uuid AND v.user_id = $1
			ORDER BY m.joined_at DESC, m.user_id DESC`, viewerID, ws[0], at[0], after[0], limit[0])
	default:
		rows, err = db.q(ctx).Query(ctx, `SELECT k.ord, v.workspace_id, m.user_id, m.role, m.joined_at
			FROM unnest($2::text[]::uuid[], $3::timestamptz[], $4::text[]::uuid[], $5::int[])
				WITH ORDINALITY AS k(ws, at, uid, lim, ord)
			JOIN members v ON v.workspace_id = k.ws AND v.user_id = $1
			LEFT JOIN LATERAL (SELECT m.user_id, m.role, m.joined_at FROM members m
				WHERE m.workspace_id = k.ws AND (m.joined_at, m.user_id) < (k.at, k.uid)
				ORDER BY m.joined_at DESC, m.user_id DESC LIMIT k.lim) m ON true
			ORDER BY k.ord, m.joined_at DESC, m.user_id DESC`, viewerID, ws, at, after, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("member lists: %w", err)
	}
	defer rows.Close()
	items := make(map[int][]*Member, len(ord))
	for rows.Next() {
		var k int64
		var wsID string
		var userID, role *string
		var joinedAt *time.Time
		if err := rows.Scan(&k, &wsID, &userID, &role, &joinedAt); err != nil {
			return nil, fmt.Errorf("member lists: %w", err)
		}
		i := ord[k-1]
		if _, ok := items[i]; !ok {
			items[i] = make([]*Member, 0, lists[i].Page.First+1) // the viewer is a member: the list exists
		}
		if userID == nil {
			continue // a page past the end
		}
		items[i] = append(items[i], &Member{WorkspaceID: wsID, UserID: *userID, Role: Role(*role), JoinedAt: *joinedAt})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("member lists: %w", err)
	}
	for i, page := range items {
		l := lists[i]
		out[i] = connection(page, l.Page, MembersScope(l.WorkspaceID), memberKey)
	}
	return out, nil
}

// errLastOwner is returned when a change would leave a workspace without an OWNER.
var errLastOwner = errs.Errorf(errs.CodeConflict, "the last OWNER of a workspace cannot be removed or demoted")

// errOwnerOnly is returned when a non-OWNER tries to make or unmake an OWNER.
var errOwnerOnly = errs.Errorf(errs.CodeForbidden, "only an OWNER can make or unmake an OWNER")

// memberChange queues the checks of a change by actor of user's membership
// of the workspace ws (canonical ids, as memberIDs gives them), in two
// statements sent with the change: the workspace locked for the rest of the
// unit of work (FOR NO KEY UPDATE: the membership changes of a workspace take
// turns, so two concurrent demotions cannot both see another OWNER left;
// NOT_FOUND if it does not exist), then, in a statement of its own, whose
// snapshot is taken once the lock is held, the rules: actor is a member
// (else NOT_FOUND, as for a workspace that does not exist), an OWNER or ADMIN
// unless self (FORBIDDEN), user is a member (NOT_FOUND), only an OWNER
// changes an OWNER or makes one (to: the new role, "" for a removal;
// FORBIDDEN), and the last OWNER stays one (CONFLICT) unless the role does
// not change.
func (u *unitOfWork) memberChange(ws string, actor *User, user string, self bool, to Role) {
	u.checkParent(parentWorkspace.locked("FOR NO KEY UPDATE"), ws, actor, RoleViewer, "manage members", "", nil)
	u.check(`SELECT taskflow_check(CASE
			WHEN a.role IS NULL THEN 'no_workspace'
			WHEN NOT $4::bool AND NOT (a.role = ANY($5::text[])) THEN 'forbidden'
			WHEN m.role IS NULL THEN 'no_member'
			WHEN (m.role = 'OWNER' OR $6::text = 'OWNER') AND a.role <> 'OWNER' THEN 'owner_only'
			WHEN m.role = 'OWNER' AND m.role IS DISTINCT FROM NULLIF($6::text, '')
				AND (SELECT count(*) FROM members o WHERE o.workspace_id = $1 AND o.role = 'OWNER') <= 1 THEN 'last_owner'
		END)
		FROM (SELECT 1) one LEFT JOIN members a ON a.workspace_id = $1 AND a.user_id = $2
		LEFT JOIN members m ON m.workspace_id = $1 AND m.user_id = $3::uuid`,
		[]any{ws, actor.ID, user, self, rolesAtLeast(RoleAdmin), string(to)},
		refusals{"no_workspace": notFound("workspace"), "forbidden": forbidden("manage members"),
			"no_member": notFound("member"), "owner_only": errOwnerOnly, "last_owner": errLastOwner})
}

// memberSnapshotSQL is audit.Snapshot of a Member as Postgres makes it from a
// members row d (TestMemberChangesInSQLAreGos compares them).
const memberSnapshotSQL = `jsonb_build_object('workspaceId', d.workspace_id, 'userId', d.user_id, 'role', d.role)`

// memberIDs returns the canonical ids of a member change: NOT_FOUND for a
// malformed workspace id, and the nil UUID, which no user has, for a
// malformed user id (no such member: the checks say NOT_FOUND in their turn,
// after the actor's role).
func memberIDs(workspaceID, userID string) (ws, user string, err error) {
	if ws, err = canonicalID(workspaceID); err != nil {
		return "", "", notFound("workspace")
	}
	if user, err = canonicalID(userID); err != nil {
		user = uuid.Nil.String()
	}
	return ws, user, nil
}

// UpdateMemberRole changes a member's role and records member.role_changed with
// metadata.changes.role, in one round trip with the commit; setting the role a
// member already has changes nothing and records nothing. The actor must be an
// OWNER or ADMIN, and an OWNER when the member is or becomes an OWNER. It
// returns UNAUTHENTICATED for no actor, NOT_FOUND if the actor or the user is
// not a member of the workspace, FORBIDDEN for a weaker role, BAD_USER_INPUT
// for an unknown role, and CONFLICT when it would demote the last OWNER.
// Within a unit of work of the caller's, the errors that depend on the
// members come when it commits, and the member returned is filled in then
// (as updateRecorded's rows are).
func (db *DB) UpdateMemberRole(ctx context.Context, actor *User, workspaceID, userID string, role Role) (*Member, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !role.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "role: not a valid role")
	}
	ws, user, err := memberIDs(workspaceID, userID)
	if err != nil {
		return nil, err
	}
	out := &Member{WorkspaceID: ws, UserID: user}
	err = db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		u.memberChange(ws, actor, user, false, role)
		rec, err := db.recordNow(ctx, actor, "member.role_changed")
		if err != nil {
			return err
		}
		event, params := recordedFrom(&rec, "a, b", "a.workspace_id", "a.user_id",
			`jsonb_build_object('changes', jsonb_build_object('role', jsonb_build_object('from', b.role, 'to', a.role)))`,
			[]any{ws, user, string(role)})
		u.tx.queueDeferred(deferred{sql: changeSQL("members", "workspace_id = $1 AND user_id = $2",
			"x.workspace_id = b.workspace_id AND x.user_id = b.user_id", "role = $3", "b.role <> $3", event,
			"m.workspace_id, m.user_id, m.role, m.joined_at", "m"),
			args: params, read: func(br pgx.BatchResults) error {
				if err := br.QueryRow().Scan(&out.WorkspaceID, &out.UserID, &out.Role, &out.JoinedAt); err != nil {
					return fmt.Errorf("update member role: %w", err)
				}
				return nil
			}})
		u.made(out, `(SELECT `+memberSnapshotSQL+` || jsonb_build_object('joinedAt', `+rfc3339SQL("d.joined_at")+`)
			FROM members d WHERE d.workspace_id = ($5::uuid[])[1] AND d.user_id = ($5::uuid[])[2])`, []string{ws, user})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveMember removes a user from the workspace and records member.removed,
// in one round trip with the commit; the user's tasks in the workspace become
// unassigned (the foreign key's ON DELETE SET NULL), and the event says how
// many. Any member may remove themselves (leave); removing someone else needs
// an OWNER or ADMIN, and an OWNER to remove an OWNER. It returns
// UNAUTHENTICATED for no actor, NOT_FOUND if the actor or the user is not a
// member, FORBIDDEN for a weaker role, and CONFLICT when it would remove the
// last OWNER.
func (db *DB) RemoveMember(ctx context.Context, actor *User, workspaceID, userID string) error {
	if actor == nil {
		return errs.ErrUnauthenticated
	}
	ws, user, err := memberIDs(workspaceID, userID)
	if err != nil {
		return err
	}
	return db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		u.memberChange(ws, actor, user, user == actor.ID, "")
		rec, err := db.recordNow(ctx, actor, "member.removed")
		if err != nil {
			return err
		}
		// The tasks counted are those the delete unassigns: the statement's
		// snapshot, taken with the workspace locked.
		event, params := recordedFrom(&rec, "d", "d.workspace_id", "d.user_id", memberSnapshotSQL+
			` || jsonb_build_object('unassignedTasks', (SELECT count(*) FROM tasks t
				WHERE t.workspace_id = d.workspace_id AND t.assignee_id = d.user_id))`, []any{ws, user})
		u.write("remove member", `WITH d AS (DELETE FROM members WHERE workspace_id = $1 AND user_id = $2
			AND taskflow_ok() RETURNING *) `+event, params, 1)
		return nil
	})
}
