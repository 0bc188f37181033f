package store_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"taskflow/store"
	"taskflow/store/storetest"
)

// wantConstraint fails unless err is Postgres's refusal naming constraint.
func wantConstraint(t *testing.T, what string, err error, constraint string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != constraint {
		t.Errorf("%s: %v, want %s", what, err, constraint)
	}
}

// An operator's UPDATE that gives a membership to another user is bounded by
// the per-user cap as an INSERT is: at MaxWorkspacesPerUser it is refused
// (members_per_user_cap, the store's CONFLICT) and changes nothing, one row
// or several. A membership moved between workspaces of one user, or a role
// changed, is not counted: neither adds to the user's workspaces.
func TestWorkspaceCapHoldsForUpdates(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	full := mkUser(t, db, "full@example.com")
	fillers := joinFillers(t, db, full, store.MaxWorkspacesPerUser)
	other := mkUser(t, db, "other@example.com")
	ws, err := db.CreateWorkspace(ctx, other, "Other's")
	if err != nil {
		t.Fatal(err)
	}
	alice := mkUser(t, db, "alice@example.com")
	joined := joinFillers(t, db, alice, 2)

	_, err = db.Pool.Exec(ctx, `UPDATE members SET user_id = $1 WHERE workspace_id = $2`, full.ID, ws.ID)
	wantConstraint(t, "an UPDATE of user_id at the cap", err, "members_per_user_cap")
	_, err = db.Pool.Exec(ctx, `UPDATE members SET user_id = $1 WHERE user_id = $2`, full.ID, alice.ID)
	wantConstraint(t, "an UPDATE of two memberships' user_id at the cap", err, "members_per_user_cap")
	if n := memberships(t, db, full); n != store.MaxWorkspacesPerUser {
		t.Fatalf("%d memberships after the refusals, want %d", n, store.MaxWorkspacesPerUser)
	}
	// Moving one's membership to another workspace, or changing its role,
	// keeps the count.
	if _, err := db.Pool.Exec(ctx, `UPDATE members SET workspace_id = $1 WHERE workspace_id = $2 AND user_id = $3`,
		joined[0], fillers[0], full.ID); err != nil {
		t.Errorf("a membership moved to another workspace at the cap: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE members SET role = 'VIEWER' WHERE user_id = $1`, full.ID); err != nil {
		t.Errorf("roles changed at the cap: %v", err)
	}
	// One place free: one membership may be given, the second of one
	// statement is refused with the first.
	if err := db.RemoveMember(ctx, full, joined[0], full.ID); err != nil {
		t.Fatal(err)
	}
	_, err = db.Pool.Exec(ctx, `UPDATE members SET user_id = $1 WHERE user_id = $2`, full.ID, alice.ID)
	wantConstraint(t, "an UPDATE of two memberships into one place", err, "members_per_user_cap")
	if _, err := db.Pool.Exec(ctx, `UPDATE members SET user_id = $1 WHERE workspace_id = $2`, full.ID, ws.ID); err != nil {
		t.Errorf("an UPDATE of user_id below the cap: %v", err)
	}
	if n := memberships(t, db, full); n != store.MaxWorkspacesPerUser {
		t.Fatalf("%d memberships, want %d", n, store.MaxWorkspacesPerUser)
	}
}

// An operator's UPDATE that moves memberships into another workspace is
// bounded by the per-workspace cap as an INSERT is: at
// MaxMembersPerWorkspace it is refused (members_per_workspace_cap) and
// changes nothing, one row or several. A member replaced by another user in
// place, or a role changed, is not counted: the workspace keeps its size.
func TestMembersCapHoldsForUpdates(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	owner := mkUser(t, db, "owner@example.com")
	big, err := db.CreateWorkspace(ctx, owner, "Big")
	if err != nil {
		t.Fatal(err)
	}
	fillers := fillMembers(t, db, big.ID, store.MaxMembersPerWorkspace-1) // with the owner: full
	small, err := db.CreateWorkspace(ctx, owner, "Small")
	if err != nil {
		t.Fatal(err)
	}
	movers := fillMembers(t, db, small.ID, 2)

	_, err = db.Pool.Exec(ctx, `UPDATE members SET workspace_id = $1 WHERE workspace_id = $2 AND user_id = $3`,
		big.ID, small.ID, movers[0])
	wantConstraint(t, "an UPDATE of workspace_id at the cap", err, "members_per_workspace_cap")
	_, err = db.Pool.Exec(ctx, `UPDATE members SET workspace_id = $1 WHERE workspace_id = $2 AND role = 'VIEWER'`,
		big.ID, small.ID)
	wantConstraint(t, "an UPDATE of two members' workspace_id at the cap", err, "members_per_workspace_cap")
	if n := members(t, db, big.ID); n != store.MaxMembersPerWorkspace {
		t.Fatalf("%d members after the refusals, want %d", n, store.MaxMembersPerWorkspace)
	}
	// A member replaced in place, and roles changed, keep the size.
	carol := mkUser(t, db, "carol@example.com")
	if _, err := db.Pool.Exec(ctx, `UPDATE members SET user_id = $1 WHERE workspace_id = $2 AND user_id = $3`,
		carol.ID, big.ID, fillers[0]); err != nil {
		t.Errorf("a member replaced in place at the cap: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE members SET role = 'MEMBER' WHERE workspace_id = $1 AND role = 'VIEWER'`,
		big.ID); err != nil {
		t.Errorf("roles changed at the cap: %v", err)
	}
	// One place free: two moved in one statement are refused together, one
	// is taken.
	if err := db.RemoveMember(ctx, owner, big.ID, carol.ID); err != nil {
		t.Fatal(err)
	}
	_, err = db.Pool.Exec(ctx, `UPDATE members SET workspace_id = $1 WHERE workspace_id = $2 AND role = 'VIEWER'`,
		big.ID, small.ID)
	wantConstraint(t, "an UPDATE of two members into one place", err, "members_per_workspace_cap")
	if _, err := db.Pool.Exec(ctx, `UPDATE members SET workspace_id = $1 WHERE workspace_id = $2 AND user_id = $3`,
		big.ID, small.ID, movers[0]); err != nil {
		t.Errorf("an UPDATE of workspace_id below the cap: %v", err)
	}
	if n := members(t, db, big.ID); n != store.MaxMembersPerWorkspace {
		t.Fatalf("%d members, want %d", n, store.MaxMembersPerWorkspace)
	}
}
