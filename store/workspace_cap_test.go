package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// joinFillers makes u a MEMBER of n new workspaces straight in SQL (the cap's
// tests need hundreds) and returns their ids. As a MEMBER, u may leave any.
func joinFillers(t *testing.T, db *store.DB, u *store.User, n int) []string {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `WITH w AS (INSERT INTO workspaces (name)
			SELECT 'filler ' || g FROM generate_series(1, $2::int) g RETURNING id)
		INSERT INTO members (workspace_id, user_id, role) SELECT id, $1, 'MEMBER' FROM w RETURNING workspace_id::text`, u.ID, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != n {
		t.Fatalf("%d filler workspaces of %d (%v)", len(ids), n, err)
	}
	return ids
}

// countRows returns the count(*) query q gives.
func countRows(t *testing.T, db *store.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// memberships counts u's workspaces.
func memberships(t *testing.T, db *store.DB, u *store.User) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM members WHERE user_id = $1`, u.ID)
}

// wantCapRefusal fails unless err is the typed CONFLICT of the cap.
func wantCapRefusal(t *testing.T, what string, err error) {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeConflict ||
		!strings.Contains(e.Message, fmt.Sprintf("%d workspaces", store.MaxWorkspacesPerUser)) {
		t.Errorf("%s at the cap: %v, want the CONFLICT of MaxWorkspacesPerUser", what, err)
	}
}

// An account in MaxWorkspacesPerUser workspaces can neither create nor join
// another: CONFLICT, and nothing changes (no workspace, no event, the
// invitation still open). Leaving one frees a place, for a join and then,
// after leaving again, for a create. Below the cap both work.
func TestWorkspaceCapRefusesCreateAndAccept(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	alice, bob := mkUser(t, db, "alice@example.com"), mkUser(t, db, "bob@example.com")
	bobs, err := db.CreateWorkspace(ctx, bob, "Bob's")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := db.InviteMember(ctx, bob, bobs.ID, alice.Email, store.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	fillers := joinFillers(t, db, alice, store.MaxWorkspacesPerUser-1)
	// Under the cap a create works, and takes the last place.
	if _, err := db.CreateWorkspace(ctx, alice, "The last one"); err != nil {
		t.Fatalf("create below the cap: %v", err)
	}
	if n := memberships(t, db, alice); n != store.MaxWorkspacesPerUser {
		t.Fatalf("alice is in %d workspaces, want %d", n, store.MaxWorkspacesPerUser)
	}

	workspaces := countRows(t, db, `SELECT count(*) FROM workspaces`)
	events := countRows(t, db, `SELECT count(*) FROM audit_events`)
	_, err = db.CreateWorkspace(ctx, alice, "One too many")
	wantCapRefusal(t, "createWorkspace", err)
	_, err = db.AcceptInvitation(ctx, alice, inv.ID)
	wantCapRefusal(t, "acceptInvitation", err)
	if n := countRows(t, db, `SELECT count(*) FROM workspaces`); n != workspaces {
		t.Errorf("%d workspaces after the refusals, want %d", n, workspaces)
	}
	if n := countRows(t, db, `SELECT count(*) FROM audit_events`); n != events {
		t.Errorf("%d audit events after the refusals, want %d", n, events)
	}
	if n := countRows(t, db, `SELECT count(*) FROM invitations WHERE id = $1`, inv.ID); n != 1 {
		t.Error("the refused acceptance deleted the invitation")
	}
	if n := memberships(t, db, alice); n != store.MaxWorkspacesPerUser {
		t.Fatalf("alice is in %d workspaces after the refusals, want %d", n, store.MaxWorkspacesPerUser)
	}
	// SQL an operator runs is bounded too; joining a workspace one is in
	// already is still the primary key's conflict, not the cap's.
	var pgErr *pgconn.PgError
	_, err = db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, bobs.ID, alice.ID)
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "members_per_user_cap" {
		t.Errorf("an INSERT at the cap: %v, want members_per_user_cap", err)
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, fillers[0], alice.ID)
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "members_pkey" {
		t.Errorf("an INSERT of a membership there is at the cap: %v, want members_pkey", err)
	}

	// Leaving frees a place: the invitation can be accepted, then the cap holds again.
	if err := db.RemoveMember(ctx, alice, fillers[0], alice.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcceptInvitation(ctx, alice, inv.ID); err != nil {
		t.Fatalf("accept after leaving one: %v", err)
	}
	_, err = db.CreateWorkspace(ctx, alice, "One too many")
	wantCapRefusal(t, "createWorkspace", err)
	if err := db.RemoveMember(ctx, alice, fillers[1], alice.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateWorkspace(ctx, alice, "After leaving"); err != nil {
		t.Fatalf("create after leaving one: %v", err)
	}
	if n := memberships(t, db, alice); n != store.MaxWorkspacesPerUser {
		t.Fatalf("alice is in %d workspaces, want %d", n, store.MaxWorkspacesPerUser)
	}
	// Others are not concerned.
	if _, err := db.CreateWorkspace(ctx, bob, "Bob's second"); err != nil {
		t.Fatal(err)
	}
}

// Concurrent creates and accepts by an account one place below the cap,
// each on a connection of its own: exactly one succeeds, the others are
// refused with the cap's CONFLICT, and the account ends at the cap exactly,
// with no workspace or event of the refused ones left behind. To be sure
// they overlap, the test holds the user's row FOR UPDATE until all of them
// wait for a lock (each for the trigger's lock on that row; without it, for
// the foreign key's check of its insert, once it has counted).
func TestWorkspaceCapHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	const creates, accepts = 6, 2
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.MaxConns = creates + accepts + 3 }), nil)
	ctx := t.Context()
	alice, bob := mkUser(t, db, "alice@example.com"), mkUser(t, db, "bob@example.com")
	var invitations []string
	for i := range accepts {
		ws, err := db.CreateWorkspace(ctx, bob, fmt.Sprintf("Bob's %d", i))
		if err != nil {
			t.Fatal(err)
		}
		inv, err := db.InviteMember(ctx, bob, ws.ID, alice.Email, store.RoleViewer)
		if err != nil {
			t.Fatal(err)
		}
		invitations = append(invitations, inv.ID)
	}
	joinFillers(t, db, alice, store.MaxWorkspacesPerUser-1)
	workspaces := countRows(t, db, `SELECT count(*) FROM workspaces`)

	results := raceBehindLock(t, db, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, alice.ID, creates+accepts, func(i int) error {
		var err error
		if i < creates {
			_, err = db.CreateWorkspace(context.Background(), alice, fmt.Sprintf("Race %d", i))
		} else {
			_, err = db.AcceptInvitation(context.Background(), alice, invitations[i-creates])
		}
		return err
	})
	ok := 0
	for _, err := range results {
		if err == nil {
			ok++
			continue
		}
		wantCapRefusal(t, "a concurrent create or accept", err)
	}
	if ok != 1 {
		t.Errorf("%d of %d concurrent creates and accepts succeeded, want 1", ok, creates+accepts)
	}
	if n := memberships(t, db, alice); n != store.MaxWorkspacesPerUser {
		t.Errorf("alice is in %d workspaces after the race, want %d", n, store.MaxWorkspacesPerUser)
	}
	created := countRows(t, db, `SELECT count(*) FROM workspaces`) - workspaces
	createdEvents := countRows(t, db, `SELECT count(*) FROM audit_events WHERE action = 'workspace.created' AND actor_id = $1`, alice.ID)
	joinedEvents := countRows(t, db, `SELECT count(*) FROM audit_events WHERE action = 'member.joined' AND actor_id = $1`, alice.ID)
	if created != createdEvents || created+joinedEvents != 1 {
		t.Errorf("the race created %d workspaces, recorded %d workspace.created and %d member.joined: want one create or one join",
			created, createdEvents, joinedEvents)
	}
}

// raceBehindLock locks a row with lock (a SELECT ... FOR UPDATE of arg) in
// a transaction of its own, starts run(0) to run(n-1) at once, releases the
// row once all n wait on a lock (or one has answered already), and returns
// their errors: n transactions that all reached the point where the row
// decides between them.
func raceBehindLock(t *testing.T, db *store.DB, lock string, arg any, n int, run func(i int) error) []error {
	t.Helper()
	ctx := t.Context()
	holder, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background()) //nolint:errcheck // released below; a no-op then
	if _, err := holder.Exec(ctx, lock, arg); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results <- run(i) })
	}
	for waiting := 0; waiting < n && len(results) == 0; {
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	var out []error
	for err := range results {
		out = append(out, err)
	}
	return out
}
