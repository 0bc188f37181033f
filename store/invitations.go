package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/errs"
)

// InvitationLifetime is how long an invitation can be accepted or declined.
// An expired invitation is listed nowhere, cannot be accepted, declined or
// revoked, and is deleted when its workspace next invites someone.
const InvitationLifetime = 7 * 24 * time.Hour

// MaxOpenInvitations is the most unexpired invitations a workspace may have
// at once: enough to invite a whole department in one go, few enough that a
// workspace's invitations stay a handful of pages and its expired ones (kept
// until the next invitation) stay bounded too.
const MaxOpenInvitations = 500

// Errors of invitations.
var (
	errInvitationExpired = errs.Errorf(errs.CodeConflict,
		"the invitation has expired: ask an OWNER or ADMIN of the workspace for a new one")
	errInviteeOnly = errs.Errorf(errs.CodeForbidden,
		"only the invitee (the account with the invited e-mail) can accept or decline an invitation")
	errRevokeAdminOnly = errs.Errorf(errs.CodeForbidden,
		"only an OWNER or ADMIN can revoke an invitation; decline it instead")
	errAlreadyMember      = errs.Errorf(errs.CodeConflict, "a member of this workspace has this e-mail")
	errTooManyInvitations = errs.Errorf(errs.CodeConflict,
		"the workspace has %d open invitations, the most it may have: revoke some, or wait until they are answered or expire",
		MaxOpenInvitations)
	// errAddMemberRetired is the answer of the deprecated addMember once its
	// checks pass: nobody becomes a member without accepting an invitation.
	errAddMemberRetired = errs.Errorf(errs.CodeForbidden,
		"addMember no longer adds members: people join a workspace by accepting an invitation. "+
			"Invite them with inviteMember(workspaceId, email, role) instead")
)

// invitationColumns is the column list scanned by scanInvitation: the
// invitation i and the name of its workspace w.
const invitationColumns = `i.id, i.workspace_id, w.name, i.email, i.role, i.invited_by, i.created_at, i.expires_at`

// scanInvitation scans the columns lead (read first), then those of
// invitationColumns. Columns of invitationColumns that are all NULL (the
// outer side of a join that found nothing) give a nil invitation.
func scanInvitation(row pgx.Row, lead ...any) (*Invitation, error) {
	var (
		inv                         Invitation
		id, ws, wsName, email, role *string
		createdAt, expiresAt        *time.Time
	)
	dest := append(lead, &id, &ws, &wsName, &email, &role, &inv.InvitedByID, &createdAt, &expiresAt)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if id == nil {
		return nil, nil
	}
	inv.ID, inv.WorkspaceID, inv.WorkspaceName, inv.Email, inv.Role = *id, *ws, *wsName, *email, Role(*role)
	inv.CreatedAt, inv.ExpiresAt = *createdAt, *expiresAt
	return &inv, nil
}

// inviteChecks queues the checks of an invitation of email (normalized, or
// "" with emailErr, NormalizeEmail's error) to the workspace ws (a canonical
// id) with role by actor, in two statements, the first of which locks the
// workspace for the rest of the unit of work (FOR NO KEY UPDATE, as for every
// membership change: a member added meanwhile is then found). The second,
// whose snapshot is taken once the lock is held (memberChange says why),
// checks in the order their errors take precedence: NOT_FOUND if the actor
// is not a member of the workspace, FORBIDDEN for a role below ADMIN or for
// an ADMIN inviting an OWNER, emailErr, CONFLICT if a member has the e-mail,
// and, when open, CONFLICT if the workspace has MaxOpenInvitations open
// invitations. None of its answers, nor the statements, depends on whether
// an account has the e-mail without being a member.
func (u *unitOfWork) inviteChecks(ws string, actor *User, email string, emailErr error, role Role, open bool) {
	u.checkParent(parentWorkspace.locked("FOR NO KEY UPDATE"), ws, actor, RoleViewer, "invite members", "", nil)
	u.check(`SELECT taskflow_check(CASE
			WHEN a.role IS NULL THEN 'no_workspace'
			WHEN NOT (a.role = ANY($3::text[])) THEN 'forbidden'
			WHEN $4::text = 'OWNER' AND a.role <> 'OWNER' THEN 'owner_only'
			WHEN NOT $5::bool THEN 'bad_email'
			WHEN EXISTS (SELECT 1 FROM users x JOIN members m ON m.user_id = x.id AND m.workspace_id = $1
				WHERE x.email = $6::text) THEN 'member'
			WHEN $7::bool AND (SELECT count(*) FROM invitations
				WHERE workspace_id = $1 AND expires_at > now()) >= $8::int THEN 'too_many'
		END)
		FROM (SELECT 1) one LEFT JOIN members a ON a.workspace_id = $1 AND a.user_id = $2`,
		[]any{ws, actor.ID, rolesAtLeast(RoleAdmin), string(role), emailErr == nil, email, open, MaxOpenInvitations},
		refusals{"no_workspace": notFound("workspace"), "forbidden": forbidden("invite members"),
			"owner_only": errOwnerOnly, "bad_email": emailErr, "member": errAlreadyMember, "too_many": errTooManyInvitations})
}

// invitationsTable is the invitations table for the write helpers.
var invitationsTable = table[Invitation]{kind: "invitation", name: "invitations"}

// invitationSnapshotSQL is audit.Snapshot of an Invitation as Postgres makes
// it from an invitations row d (TestSnapshotsInSQLAreGos compares them).
var invitationSnapshotSQL = `jsonb_build_object('id', d.id, 'workspaceId', d.workspace_id, 'email', d.email,
	'role', d.role, 'invitedById', d.invited_by, 'expiresAt', ` + rfc3339SQL("d.expires_at") + `)`

// invitationJSONSQL is the JSON of an Invitation d of workspace w as
// json.Marshal writes it: the idempotency record of inviteMember.
var invitationJSONSQL = invitationSnapshotSQL + ` || jsonb_build_object('workspaceName', w.name, 'createdAt', ` +
	rfc3339SQL("d.created_at") + `)`

// InviteMember invites the e-mail address to the workspace with role and
// records member.invited (entity: the invitation). The invitation is open for
// InvitationLifetime; whoever has (or later registers) an account with the
// e-mail sees it in their invitations and may accept or decline it. The actor
// must be an OWNER or ADMIN, and an OWNER to invite an OWNER. Its answer, its
// event and the statements it runs are the same whether or not an account has
// the e-mail. It returns UNAUTHENTICATED for no actor, NOT_FOUND if the actor
// is not a member of the workspace, FORBIDDEN for a weaker role,
// BAD_USER_INPUT for a malformed e-mail (one NewEmail refuses) or role, and
// CONFLICT if a member has the e-mail, an open invitation of the e-mail
// exists, or the workspace has MaxOpenInvitations open invitations.
func (db *DB) InviteMember(ctx context.Context, actor *User, workspaceID, email string, role Role) (*Invitation, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !role.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "role: not a valid role")
	}
	ws, err := canonicalID(workspaceID)
	if err != nil {
		return nil, notFound("workspace")
	}
	e, emailErr := NewEmail(email)
	out := &Invitation{}
	err = db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		u.inviteChecks(ws, actor, e, emailErr, role, true)
		if emailErr != nil { // refused by the checks, in its turn
			if err := u.tx.flush(ctx); err != nil {
				return err
			}
			return emailErr
		}
		rec, err := db.recordNow(ctx, actor, "member.invited")
		if err != nil {
			return err
		}
		// Expired invitations go first: one of this e-mail would block the new
		// one, and deleting them here bounds what a workspace keeps.
		u.write("delete expired invitations", `DELETE FROM invitations WHERE workspace_id = $1 AND expires_at <= now()
			AND taskflow_ok()`, []any{ws}, -1)
		event, params := recordedFrom(&rec, "d", "d.workspace_id", "d.id", invitationSnapshotSQL,
			[]any{ws, e, string(role), actor.ID, int64(InvitationLifetime / time.Second)})
		queueRow(u, "invite", `WITH d AS (
				INSERT INTO invitations (workspace_id, email, role, invited_by, created_at, expires_at)
				SELECT $1, $2, $3, $4, c.at, c.at + $5 * interval '1 second' FROM (SELECT clock_timestamp() AS at) c
				WHERE taskflow_ok()
				RETURNING *),
				e AS (`+event+`)
			SELECT `+invitationColumns+` FROM d i JOIN workspaces w ON w.id = i.workspace_id`, params, scanInvitation, out)
		u.made(out, `(SELECT `+invitationJSONSQL+` FROM invitations d JOIN workspaces w ON w.id = d.workspace_id
			WHERE d.workspace_id = ($5::text[])[1]::uuid AND d.email = ($5::text[])[2])`, []string{ws, e})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AddMember is the deprecated addMember: membership needs the invitee's
// consent, so it adds no one. It runs the checks of InviteMember and answers
// what it answered before for them; then, where it used to add the member, it
// refuses and changes nothing, the same way whether or not an account has the
// e-mail. It returns UNAUTHENTICATED for no actor, NOT_FOUND if the actor is
// not a member of the workspace, FORBIDDEN for a weaker role, BAD_USER_INPUT
// for a malformed e-mail or role, CONFLICT if a member has the e-mail, and
// FORBIDDEN (naming inviteMember) otherwise.
func (db *DB) AddMember(ctx context.Context, actor *User, workspaceID, email string, role Role) (*Member, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !role.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "role: not a valid role")
	}
	ws, err := canonicalID(workspaceID)
	if err != nil {
		return nil, notFound("workspace")
	}
	e, emailErr := NormalizeEmail(email)
	err = db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		u.inviteChecks(ws, actor, e, emailErr, role, false)
		if err := u.tx.flush(ctx); err != nil {
			return err
		}
		if emailErr != nil {
			return emailErr
		}
		return errAddMemberRetired
	})
	return nil, err
}

// checkInvitation queues the check of a change of the invitation id by
// actor, with the invitation locked FOR UPDATE for the rest of the unit of
// work. Only the invitee (the account with the invited e-mail) and the
// workspace's OWNERs and ADMINs may see an invitation: for anyone else, and
// for an unknown id, it refuses with NOT_FOUND. Then refuse, an SQL
// expression over the invitation as r (with actor's role in its workspace as
// r.actor_role, actor's e-mail as $3 and the roles from ADMIN up as $4):
// NULL to go on or a key of more. Then CONFLICT if it has expired.
func (u *unitOfWork) checkInvitation(id string, actor *User, refuse string, more refusals) {
	r := refusals{"not_found": notFound("invitation"), "expired": errInvitationExpired}
	for k, v := range more {
		r[k] = v
	}
	u.check(`SELECT taskflow_check(CASE
			WHEN r.id IS NULL OR (r.email <> $3 AND NOT coalesce(r.actor_role = ANY($4::text[]), false)) THEN 'not_found'
			ELSE coalesce(`+refuse+`, CASE WHEN r.expires_at <= now() THEN 'expired' END) END)
		FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT i.*, m.role AS actor_role FROM invitations i
			LEFT JOIN members m ON m.workspace_id = i.workspace_id AND m.user_id = $2
			WHERE i.id = $1 FOR UPDATE OF i) r ON true`,
		[]any{id, actor.ID, actor.Email, rolesAtLeast(RoleAdmin)}, r)
}

// checkAnswer is checkInvitation of an answer by actor, the invitee.
func (u *unitOfWork) checkAnswer(id string, actor *User) {
	u.checkInvitation(id, actor, `CASE WHEN r.email <> $3 THEN 'invitee_only' END`, refusals{"invitee_only": errInviteeOnly})
}

// AcceptInvitation makes actor, the invitee, a member of the invitation's
// workspace with its role, deletes the invitation and records member.joined
// (entity: the new member's user id, as for the other member.* events of a
// membership; metadata: the membership, the invitation's id and its inviter),
// in one round trip with the commit. It returns the workspace as the new
// member sees it, filled in when the unit of work of ctx sends its statements
// (as updateRecorded's row). It returns UNAUTHENTICATED for no actor,
// NOT_FOUND if the invitation does not exist (it was answered or revoked) or
// actor may not see it, FORBIDDEN if actor sees it without being the
// invitee, and CONFLICT if it has expired or actor is a member already.
func (db *DB) AcceptInvitation(ctx context.Context, actor *User, id string) (*Workspace, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	canon, err := canonicalID(id)
	if err != nil {
		return nil, notFound("invitation")
	}
	out := &Workspace{}
	err = db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		rec, err := db.recordNow(ctx, actor, "member.joined")
		if err != nil {
			return err
		}
		// The workspace's lock first, in a statement before the rules, as for
		// every membership change: an invitation of the same e-mail made
		// meanwhile then finds the member.
		u.check(`SELECT taskflow_check(CASE WHEN w.id IS NULL THEN 'not_found' END) FROM (SELECT 1) one
			LEFT JOIN LATERAL (SELECT w.id FROM workspaces w WHERE w.id = (SELECT workspace_id FROM invitations WHERE id = $1)
				FOR NO KEY UPDATE) w ON true`, []any{canon}, refusals{"not_found": notFound("invitation")})
		u.checkAnswer(canon, actor)
		event, params := recordedFrom(&rec, "m d, i", "d.workspace_id", "d.user_id", memberSnapshotSQL+
			` || jsonb_build_object('invitationId', i.id, 'email', i.email, 'invitedById', i.invited_by)`, []any{canon, actor.ID})
		u.tx.queueDeferred(deferred{sql: `WITH i AS (DELETE FROM invitations WHERE id = $1 AND taskflow_ok() RETURNING *),
				m AS (INSERT INTO members (workspace_id, user_id, role) SELECT i.workspace_id, $2, i.role FROM i RETURNING *),
				e AS (` + event + `)
			SELECT w.id, w.name, w.created_at, m.role FROM m JOIN workspaces w ON w.id = m.workspace_id`,
			args: params, read: func(br pgx.BatchResults) error {
				if err := br.QueryRow().Scan(&out.ID, &out.Name, &out.CreatedAt, &out.ViewerRole); err != nil {
					return mapError(fmt.Errorf("accept invitation: %w", err))
				}
				return nil
			}})
		// Its idempotency record: the membership this transaction made.
		u.made(out, `(SELECT jsonb_build_object('id', w.id, 'name', w.name, 'createdAt', `+rfc3339SQL("w.created_at")+`,
			'viewerRole', m.role) FROM members m JOIN workspaces w ON w.id = m.workspace_id
			WHERE m.user_id = $5::uuid AND m.xmin = pg_current_xact_id()::xid)`, actor.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeclineInvitation deletes the invitation as its invitee, actor, and records
// member.invitation_declined (entity: the invitation; metadata: its
// snapshot) in the workspace's log, in one round trip with the commit. It
// returns UNAUTHENTICATED for no actor, NOT_FOUND if the invitation does not
// exist (it was answered or revoked) or actor may not see it, FORBIDDEN if
// actor sees it without being the invitee, and CONFLICT if it has expired.
func (db *DB) DeclineInvitation(ctx context.Context, actor *User, id string) error {
	return deleteChecked(ctx, db, invitationsTable, actor, id, "member.invitation_declined", invitationSnapshotSQL,
		func(u *unitOfWork, id string) { u.checkAnswer(id, actor) })
}

// RevokeInvitation deletes an open invitation and records
// member.invitation_revoked (entity: the invitation; metadata: its
// snapshot), in one round trip with the commit. The actor must be an OWNER
// or ADMIN of its workspace, and an OWNER to revoke an invitation as OWNER.
// It returns UNAUTHENTICATED for no actor, NOT_FOUND if the invitation does
// not exist (it was answered or revoked) or actor may not see it, FORBIDDEN
// for the invitee (who declines instead) and for an ADMIN revoking an
// invitation as OWNER, and CONFLICT if it has expired.
func (db *DB) RevokeInvitation(ctx context.Context, actor *User, id string) error {
	return deleteChecked(ctx, db, invitationsTable, actor, id, "member.invitation_revoked", invitationSnapshotSQL,
		func(u *unitOfWork, id string) {
			u.checkInvitation(id, actor, `CASE WHEN NOT coalesce(r.actor_role = ANY($4::text[]), false) THEN 'admin_only'
				WHEN r.role = 'OWNER' AND r.actor_role <> 'OWNER' THEN 'owner_only' END`,
				refusals{"admin_only": errRevokeAdminOnly, "owner_only": errOwnerOnly})
		})
}

// DefaultInvitationPageSize is the first of an invitation list when none is given.
const DefaultInvitationPageSize = 20

// InvitationPageKey names one page of a workspace's open invitations, or of
// the viewer's own when WorkspaceID is "": the page size and the opaque cursor
// ("" for the first page). It is comparable, so loaders batch and cache by it.
type InvitationPageKey struct {
	WorkspaceID string
	First       int
	After       string
}

// scope is the cursor scope of the key's list.
func (k InvitationPageKey) scope() string {
	if k.WorkspaceID == "" {
		return "my-invitations"
	}
	return "invitations:" + strings.ToLower(k.WorkspaceID)
}

// NewInvitationPageKey validates a page request for a workspace's open
// invitations, or the viewer's own when workspaceID is "" (first nil means
// DefaultInvitationPageSize), and returns its key. It returns a
// BAD_USER_INPUT error for first out of 1..100 or a cursor that is malformed
// or comes from another list.
func NewInvitationPageKey(workspaceID string, first *int, after *string) (InvitationPageKey, error) {
	k := InvitationPageKey{WorkspaceID: workspaceID}
	p, err := NewPage(first, DefaultInvitationPageSize, after, k.scope())
	if err != nil {
		return k, err
	}
	k.First = p.First
	if after != nil {
		k.After = *after
	}
	return k, nil
}

// invitationPageArgs validates the keys' pages and returns them with the
// keyset arguments of a page query: each page's cursor position (nil for the
// first page) and its limit (First+1, to tell whether a next page exists).
func invitationPageArgs(keys []InvitationPageKey) (pages []Page, ats []*time.Time, ids []*string, limits []int32, err error) {
	pages = make([]Page, len(keys))
	ats, ids, limits = make([]*time.Time, len(keys)), make([]*string, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		p, err := NewPage(&k.First, DefaultInvitationPageSize, &k.After, k.scope())
		if err != nil {
			return nil, nil, nil, nil, err
		}
		pages[i] = p
		if p.After != nil {
			ats[i], ids[i] = &p.After.At, &p.After.ID
		}
		limits[i] = int32(p.First + 1)
	}
	return pages, ats, ids, limits, nil
}

// invitationPagesFrom reads the rows of a page query, each of which leads with
// its key's ordinal (1-based) and the columns lead, then has those of
// invitationColumns (all NULL for a key with no invitation), and returns each
// key's invitations in order. seen, if not nil, is called with the ordinal
// after lead was scanned.
func invitationPagesFrom(rows pgx.Rows, n int, seen func(ord int), lead ...any) ([][]*Invitation, error) {
	defer rows.Close()
	items := make([][]*Invitation, n)
	var ord int64
	lead = append([]any{&ord}, lead...)
	for rows.Next() {
		inv, err := scanInvitation(rows, lead...)
		if err != nil {
			return nil, fmt.Errorf("invitation pages: %w", err)
		}
		if seen != nil {
			seen(int(ord) - 1)
		}
		if inv != nil {
			items[ord-1] = append(items[ord-1], inv)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("invitation pages: %w", err)
	}
	return items, nil
}

// invitationKey returns an invitation's position in newest-first lists.
func invitationKey(inv *Invitation) (time.Time, string) { return inv.CreatedAt, inv.ID }

// invitationsReadAction names reading a workspace's invitations in FORBIDDEN errors.
const invitationsReadAction = "see the workspace's invitations (OWNER or ADMIN only)"

// InvitationPages returns one page of open (unexpired) invitations for each
// key, newest first by (created_at, id), in the order of keys, as viewer may
// see them: a workspace's (WorkspaceID set; OWNER and ADMIN only) or the
// viewer's own (WorkspaceID ""), which are the invitations of the viewer's
// e-mail, those made before the account existed included. It runs one query
// for the keys of workspaces and one for the viewer's own. The errors follow
// the loaders' contract: one per key (nil where the page is given) —
// UNAUTHENTICATED for no viewer, NOT_FOUND where the viewer is not a member of
// the workspace (or it does not exist), FORBIDDEN for a MEMBER or VIEWER,
// BAD_USER_INPUT for an invalid cursor (keys made by NewInvitationPageKey have
// none) — or a single one for all keys when a query fails.
func (db *DB) InvitationPages(ctx context.Context, viewer *User, keys []InvitationPageKey) ([]*InvitationConnection, []error) {
	out := make([]*InvitationConnection, len(keys))
	failed := make([]error, len(keys))
	if viewer == nil {
		for i := range keys {
			failed[i] = errs.ErrUnauthenticated
		}
		return out, failed
	}
	var mine, theirs []int
	for i, k := range keys {
		if k.WorkspaceID == "" {
			mine = append(mine, i)
		} else {
			theirs = append(theirs, i)
		}
	}
	pick := func(at []int) []InvitationPageKey {
		sub := make([]InvitationPageKey, len(at))
		for j, i := range at {
			sub[j] = keys[i]
		}
		return sub
	}
	if len(mine) > 0 {
		pages, err := db.ownInvitationPages(ctx, viewer, pick(mine))
		if err != nil {
			return nil, []error{err}
		}
		for j, i := range mine {
			out[i] = pages[j]
		}
	}
	if len(theirs) > 0 {
		pages, perKey, err := db.workspaceInvitationPages(ctx, viewer, pick(theirs))
		if err != nil {
			return nil, []error{err}
		}
		for j, i := range theirs {
			out[i], failed[i] = pages[j], perKey[j]
		}
	}
	return out, failed
}

// workspaceInvitationPages is InvitationPages for keys of workspaces: it
// returns the pages, and an error for each key whose page the viewer may not
// see (nil where it may), or the error of the query.
func (db *DB) workspaceInvitationPages(ctx context.Context, viewer *User, keys []InvitationPageKey) ([]*InvitationConnection, []error, error) {
	pages, ats, ids, limits, err := invitationPageArgs(keys)
	if err != nil {
		return nil, nil, err
	}
	workspaces := make([]string, len(keys))
	for i, k := range keys {
		workspaces[i] = k.WorkspaceID
		if !validID(k.WorkspaceID) {
			workspaces[i] = "00000000-0000-0000-0000-000000000000"
		}
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT k.ord, v.role, i.id, i.workspace_id, i.name, i.email, i.role, i.invited_by, i.created_at, i.expires_at
		FROM unnest($2::text[]::uuid[], $3::timestamptz[], $4::text[]::uuid[], $5::int[])
			WITH ORDINALITY AS k(ws, at, id, lim, ord)
		LEFT JOIN members v ON v.workspace_id = k.ws AND v.user_id = $1
		LEFT JOIN LATERAL (
			SELECT i.*, w.name FROM invitations i JOIN workspaces w ON w.id = i.workspace_id
			WHERE v.role IN ('OWNER', 'ADMIN') AND i.workspace_id = k.ws AND i.expires_at > now()
				AND (k.at IS NULL OR (i.created_at, i.id) < (k.at, k.id))
			ORDER BY i.created_at DESC, i.id DESC
			LIMIT k.lim) i ON true
		ORDER BY k.ord, i.created_at DESC, i.id DESC`,
		viewer.ID, workspaces, ats, ids, limits)
	if err != nil {
		return nil, nil, fmt.Errorf("invitation pages: %w", err)
	}
	roles := make([]*Role, len(keys))
	var role *Role
	items, err := invitationPagesFrom(rows, len(keys), func(i int) { roles[i] = role }, &role)
	if err != nil {
		return nil, nil, err
	}
	out := make([]*InvitationConnection, len(keys))
	failed := make([]error, len(keys))
	for i, k := range keys {
		if _, err := checkRole(roles[i], RoleAdmin, "workspace", invitationsReadAction); err != nil {
			failed[i] = err
			continue
		}
		out[i] = connection(items[i], pages[i], k.scope(), invitationKey)
	}
	return out, failed, nil
}

// ownInvitationPages is InvitationPages for the viewer's own invitations.
func (db *DB) ownInvitationPages(ctx context.Context, viewer *User, keys []InvitationPageKey) ([]*InvitationConnection, error) {
	pages, ats, ids, limits, err := invitationPageArgs(keys)
	if err != nil {
		return nil, err
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT k.ord, i.id, i.workspace_id, i.name, i.email, i.role, i.invited_by, i.created_at, i.expires_at
		FROM unnest($2::timestamptz[], $3::text[]::uuid[], $4::int[]) WITH ORDINALITY AS k(at, id, lim, ord)
		CROSS JOIN LATERAL (
			SELECT i.*, w.name FROM invitations i JOIN workspaces w ON w.id = i.workspace_id
			WHERE i.email = $1 AND i.expires_at > now()
				AND (k.at IS NULL OR (i.created_at, i.id) < (k.at, k.id))
			ORDER BY i.created_at DESC, i.id DESC
			LIMIT k.lim) i
		ORDER BY k.ord, i.created_at DESC, i.id DESC`,
		viewer.Email, ats, ids, limits)
	if err != nil {
		return nil, fmt.Errorf("own invitation pages: %w", err)
	}
	items, err := invitationPagesFrom(rows, len(keys), nil)
	if err != nil {
		return nil, err
	}
	out := make([]*InvitationConnection, len(keys))
	for i, k := range keys {
		out[i] = connection(items[i], pages[i], k.scope(), invitationKey)
	}
	return out, nil
}
