package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// fillMembers adds n new users to the workspace ws as VIEWERs, straight in
// SQL and in one statement (the cap's tests need thousands), and returns
// their ids.
func fillMembers(t *testing.T, db *store.DB, ws string, n int) []string {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `WITH u AS (INSERT INTO users (email, name, password_hash)
			SELECT 'filler-' || g || '-' || gen_random_uuid() || '@example.com', 'Filler ' || g, 'x'
			FROM generate_series(1, $2::int) g RETURNING id)
		INSERT INTO members (workspace_id, user_id, role) SELECT $1, id, 'VIEWER' FROM u RETURNING user_id::text`, ws, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != n {
		t.Fatalf("%d filler members of %d (%v)", len(ids), n, err)
	}
	return ids
}

// members counts the workspace's members.
func members(t *testing.T, db *store.DB, ws string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM members WHERE workspace_id = $1`, ws)
}

// wantMembersCapRefusal fails unless err is the typed CONFLICT of the
// per-workspace cap.
func wantMembersCapRefusal(t *testing.T, what string, err error) {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeConflict ||
		!strings.Contains(e.Message, fmt.Sprintf("has %d members", store.MaxMembersPerWorkspace)) {
		t.Errorf("%s at the cap: %v, want the CONFLICT of MaxMembersPerWorkspace", what, err)
	}
}

// A workspace with MaxMembersPerWorkspace members takes no one more:
// acceptInvitation is CONFLICT and changes nothing (no member, no event, the
// invitation still open), and SQL an operator runs is refused too, a bulk
// INSERT as a whole. Inviting stays possible. Removing a member frees a
// place; below the cap an acceptance works, and the cap is exactly
// MaxMembersPerWorkspace (the migration's argument agrees with the
// constant). Other workspaces are not concerned.
func TestMembersCapRefusesAccept(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	owner := mkUser(t, db, "owner@example.com")
	alice, bob := mkUser(t, db, "alice@example.com"), mkUser(t, db, "bob@example.com")
	ws, err := db.CreateWorkspace(ctx, owner, "Big")
	if err != nil {
		t.Fatal(err)
	}
	var invitations []string
	for _, u := range []*store.User{alice, bob} {
		inv, err := db.InviteMember(ctx, owner, ws.ID, u.Email, store.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		invitations = append(invitations, inv.ID)
	}
	fillers := fillMembers(t, db, ws.ID, store.MaxMembersPerWorkspace-2) // with the owner: one place left
	if _, err := db.AcceptInvitation(ctx, alice, invitations[0]); err != nil {
		t.Fatalf("accept below the cap: %v", err)
	}
	if n := members(t, db, ws.ID); n != store.MaxMembersPerWorkspace {
		t.Fatalf("%d members, want %d", n, store.MaxMembersPerWorkspace)
	}

	events := countRows(t, db, `SELECT count(*) FROM audit_events`)
	_, err = db.AcceptInvitation(ctx, bob, invitations[1])
	wantMembersCapRefusal(t, "acceptInvitation", err)
	if n := countRows(t, db, `SELECT count(*) FROM audit_events`); n != events {
		t.Errorf("%d audit events after the refusal, want %d", n, events)
	}
	if n := countRows(t, db, `SELECT count(*) FROM invitations WHERE id = $1`, invitations[1]); n != 1 {
		t.Error("the refused acceptance deleted the invitation")
	}
	if n := members(t, db, ws.ID); n != store.MaxMembersPerWorkspace {
		t.Fatalf("%d members after the refusal, want %d", n, store.MaxMembersPerWorkspace)
	}
	// SQL an operator runs is bounded too, a bulk insert as a whole; adding
	// one who is a member already is still the primary key's conflict.
	var pgErr *pgconn.PgError
	_, err = db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, ws.ID, bob.ID)
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "members_per_workspace_cap" {
		t.Errorf("an INSERT at the cap: %v, want members_per_workspace_cap", err)
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, ws.ID, fillers[0])
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "members_pkey" {
		t.Errorf("an INSERT of a membership there is at the cap: %v, want members_pkey", err)
	}
	// An invitation to a full workspace is made; accepting it waits for a place.
	carol := mkUser(t, db, "carol@example.com")
	if _, err := db.InviteMember(ctx, owner, ws.ID, carol.Email, store.RoleViewer); err != nil {
		t.Fatalf("invite at the cap: %v", err)
	}

	// Removing a member frees one place: bob joins, then the cap holds again.
	if err := db.RemoveMember(ctx, owner, ws.ID, fillers[0]); err != nil {
		t.Fatal(err)
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) SELECT $1, unnest($2::uuid[]), 'MEMBER'`,
		ws.ID, []string{bob.ID, carol.ID})
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "members_per_workspace_cap" {
		t.Errorf("a bulk INSERT of two into one place: %v, want members_per_workspace_cap", err)
	}
	if _, err := db.AcceptInvitation(ctx, bob, invitations[1]); err != nil {
		t.Fatalf("accept after a removal: %v", err)
	}
	if n := members(t, db, ws.ID); n != store.MaxMembersPerWorkspace {
		t.Fatalf("%d members, want %d", n, store.MaxMembersPerWorkspace)
	}
	// Others are not concerned: a workspace of one's own, with its OWNER.
	if _, err := db.CreateWorkspace(ctx, bob, "Bob's"); err != nil {
		t.Fatal(err)
	}
}

// Concurrent additions to a workspace one place below the cap, each on a
// connection of its own, exactly one of which succeeds: acceptances (which
// lock the workspace's row first) and an operator's INSERTs (which meet the
// trigger's lock only, after their own row is in). The others are refused
// with the cap's CONFLICT, and the workspace ends at the cap exactly, with
// one member.joined event at most. To be sure they overlap, the test holds
// the workspace's row FOR NO KEY UPDATE (which lets the inserts' foreign key
// checks through) until all of them wait for the lock.
func TestMembersCapHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	const accepts, inserts = 4, 4
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.MaxConns = accepts + inserts + 3 }), nil)
	ctx := t.Context()
	owner := mkUser(t, db, "owner@example.com")
	ws, err := db.CreateWorkspace(ctx, owner, "Big")
	if err != nil {
		t.Fatal(err)
	}
	var users []*store.User
	var invitations []string
	for i := range accepts + inserts {
		u := mkUser(t, db, fmt.Sprintf("u%d@example.com", i))
		users = append(users, u)
		if i < accepts {
			inv, err := db.InviteMember(ctx, owner, ws.ID, u.Email, store.RoleMember)
			if err != nil {
				t.Fatal(err)
			}
			invitations = append(invitations, inv.ID)
		}
	}
	fillMembers(t, db, ws.ID, store.MaxMembersPerWorkspace-2)

	results := raceBehindLock(t, db, `SELECT 1 FROM workspaces WHERE id = $1 FOR NO KEY UPDATE`, ws.ID, accepts+inserts, func(i int) error {
		if i < accepts {
			_, err := db.AcceptInvitation(context.Background(), users[i], invitations[i])
			return err
		}
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'VIEWER')`, ws.ID, users[i].ID)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.ConstraintName == "members_per_workspace_cap" {
			err = errs.Errorf(errs.CodeConflict, "the workspace has %d members", store.MaxMembersPerWorkspace)
		}
		return err
	})
	ok := 0
	for _, err := range results {
		if err == nil {
			ok++
			continue
		}
		wantMembersCapRefusal(t, "a concurrent accept or insert", err)
	}
	if ok != 1 {
		t.Errorf("%d of %d concurrent accepts and inserts succeeded, want 1", ok, accepts+inserts)
	}
	if n := members(t, db, ws.ID); n != store.MaxMembersPerWorkspace {
		t.Errorf("%d members after the race, want %d", n, store.MaxMembersPerWorkspace)
	}
	joined := countRows(t, db, `SELECT count(*) FROM audit_events WHERE action = 'member.joined' AND workspace_id = $1`, ws.ID)
	open := countRows(t, db, `SELECT count(*) FROM invitations WHERE workspace_id = $1`, ws.ID)
	if joined > 1 || open != accepts-joined {
		t.Errorf("the race recorded %d member.joined and left %d of %d invitations open", joined, open, accepts)
	}
}
