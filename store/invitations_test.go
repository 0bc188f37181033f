package store_test

import (
	"context"
	"testing"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// One batch of invitation pages answers each key for itself: the viewer's own
// invitations, a workspace they run, one where they are a MEMBER, one they
// are not in, a malformed id; and nothing at all for no viewer.
func TestInvitationPagesAnswerEachKey(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	alice, bob := mkUser(t, db, "alice@example.com"), mkUser(t, db, "bob@example.com")
	carol := mkUser(t, db, "carol@example.com")
	mine, err := db.CreateWorkspace(ctx, alice, "Alice's")
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := db.CreateWorkspace(ctx, bob, "Bob's")
	if err != nil {
		t.Fatal(err)
	}
	strangers, err := db.CreateWorkspace(ctx, carol, "Carol's")
	if err != nil {
		t.Fatal(err)
	}
	// Alice is a MEMBER of Bob's workspace (she accepted), and is invited to Carol's.
	toBobs, err := db.InviteMember(ctx, bob, bobs.ID, "ALICE@example.com", store.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcceptInvitation(ctx, alice, toBobs.ID); err != nil {
		t.Fatal(err)
	}
	toCarols, err := db.InviteMember(ctx, carol, strangers.ID, "alice@example.com", store.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"x@example.com", "y@example.com"} {
		if _, err := db.InviteMember(ctx, alice, mine.ID, e, store.RoleViewer); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.InviteMember(ctx, bob, bobs.ID, "z@example.com", store.RoleViewer); err != nil {
		t.Fatal(err)
	}

	key := func(ws string, first int) store.InvitationPageKey {
		k, err := store.NewInvitationPageKey(ws, &first, nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keys := []store.InvitationPageKey{key(mine.ID, 1), key("", 20), key(bobs.ID, 20), key(strangers.ID, 20), key("junk", 20), key(mine.ID, 20)}
	pages, failed := db.InvitationPages(ctx, alice, keys)
	if len(pages) != len(keys) || len(failed) != len(keys) {
		t.Fatalf("%d pages, %d errors for %d keys", len(pages), len(failed), len(keys))
	}
	wantCodes := []errs.Code{"", "", errs.CodeForbidden, errs.CodeNotFound, errs.CodeNotFound, ""}
	for i, want := range wantCodes {
		if got := errs.CodeOf(failed[i]); got != want {
			t.Errorf("key %d: code %q, want %q", i, got, want)
		}
		if (pages[i] != nil) != (want == "") {
			t.Errorf("key %d: page %v with error %v", i, pages[i], failed[i])
		}
	}
	if p := pages[0]; len(p.Edges) != 1 || !p.PageInfo.HasNextPage || p.Edges[0].Node.Email != "y@example.com" {
		t.Errorf("first page of one = %+v", p)
	}
	if p := pages[5]; len(p.Edges) != 2 || p.PageInfo.HasNextPage {
		t.Errorf("page of 20 = %+v", p)
	}
	if p := pages[1]; len(p.Edges) != 1 || p.Edges[0].Node.ID != toCarols.ID || p.Edges[0].Node.WorkspaceName != "Carol's" {
		t.Errorf("own invitations = %+v", p)
	}

	_, failed = db.InvitationPages(ctx, nil, keys[:2])
	for i, err := range failed {
		if errs.CodeOf(err) != errs.CodeUnauthenticated {
			t.Errorf("no viewer, key %d: %v", i, err)
		}
	}
}

// An invitation of the same e-mail made while the invitee's accept commits
// waits for it and then finds the member: no invitation of a member stays open.
func TestInviteWaitsForAnAcceptInFlight(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	owner, bob := mkUser(t, db, "owner@example.com"), mkUser(t, db, "bob@example.com")
	ws, err := db.CreateWorkspace(ctx, owner, "W")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := db.InviteMember(ctx, owner, ws.ID, bob.Email, store.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	held, release, accepted := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		accepted <- db.UnitOfWork(ctx, func(ctx context.Context) error {
			if _, err := db.AcceptInvitation(ctx, bob, inv.ID); err != nil {
				close(held)
				return err
			}
			close(held)
			<-release // not committed yet
			return nil
		})
	}()
	<-held
	invited := make(chan error, 1)
	go func() {
		_, err := db.InviteMember(ctx, owner, ws.ID, bob.Email, store.RoleViewer)
		invited <- err
	}()
	// Let the accept commit once the invite waits for a lock (or has answered).
	for waiting := 0; waiting == 0 && len(invited) == 0; {
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if err := <-invited; errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("invite during the accept: %v, want CONFLICT", err)
	}
	var open int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM invitations WHERE workspace_id = $1`, ws.ID).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d open invitations of a member (%v)", open, err)
	}
}
