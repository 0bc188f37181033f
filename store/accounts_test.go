package store_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	ok := map[string]string{
		"  Alice@Example.COM ":  "alice@example.com",
		"bob.smith+tag@ex.org":  "bob.smith+tag@ex.org",
		"\tCAROL@EXAMPLE.COM\n": "carol@example.com",
	}
	for in, want := range ok {
		got, err := store.NormalizeEmail(in)
		if err != nil || got != want {
			t.Errorf("NormalizeEmail(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "alice", "alice@", "@example.com", "Alice <alice@example.com>",
		"a b@example.com", strings.Repeat("a", 250) + "@example.com"} {
		if _, err := store.NormalizeEmail(in); errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("NormalizeEmail(%q): err %v, want BAD_USER_INPUT", in, err)
		}
	}
}

// mkUser inserts a user and returns it.
func mkUser(t *testing.T, db *store.DB, email string) *store.User {
	t.Helper()
	var u store.User
	if err := db.Pool.QueryRow(context.Background(), `INSERT INTO users (email, name, password_hash) VALUES ($1, 'n', 'x') RETURNING id, email`,
		email).Scan(&u.ID, &u.Email); err != nil {
		t.Fatal(err)
	}
	return &u
}

func TestAccountBatchReadsAreConfinedToTheViewer(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	alice, bob := mkUser(t, db, "alice@example.com"), mkUser(t, db, "bob@example.com")
	ws, err := db.CreateWorkspace(ctx, alice, "A")
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, alice, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Bob is not a member: nothing of the workspace is visible to him.
	if m, err := db.WorkspacesByIDs(ctx, bob.ID, []string{ws.ID, "junk"}); err != nil || len(m) != 0 {
		t.Fatalf("WorkspacesByIDs as a stranger = %v, %v", m, err)
	}
	if m, err := db.ProjectsByIDs(ctx, bob.ID, []string{p.ID}); err != nil || len(m) != 0 {
		t.Fatalf("ProjectsByIDs as a stranger = %v, %v", m, err)
	}
	if m, err := db.MembersByWorkspaces(ctx, bob.ID, []string{ws.ID}); err != nil || len(m) != 0 {
		t.Fatalf("MembersByWorkspaces as a stranger = %v, %v", m, err)
	}
	if m, err := db.WorkspacesOfUsers(ctx, bob.ID, []string{alice.ID}); err != nil || len(m) != 0 {
		t.Fatalf("WorkspacesOfUsers as a stranger = %v, %v", m, err)
	}
	page, err := store.NewPage(nil, 20, nil, store.ProjectsScope(ws.ID, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Projects(ctx, bob, ws.ID, false, page); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("Projects as a stranger: %v, want NOT_FOUND", err)
	}
	// Alice sees them; malformed ids are ignored, not errors.
	if m, err := db.WorkspacesByIDs(ctx, alice.ID, []string{ws.ID, "junk"}); err != nil || m[ws.ID] == nil || m[ws.ID].ViewerRole != store.RoleOwner {
		t.Fatalf("WorkspacesByIDs as the owner = %v, %v", m, err)
	}
	if m, err := db.UsersByIDs(ctx, []string{alice.ID, bob.ID, "junk"}); err != nil || len(m) != 2 {
		t.Fatalf("UsersByIDs = %v, %v", m, err)
	}
	lists, err := db.ProjectLists(ctx, alice.ID, []store.ProjectList{{WorkspaceID: ws.ID, Page: page}, {WorkspaceID: "junk", Page: page}})
	if err != nil || lists[0] == nil || len(lists[0].Edges) != 1 || lists[1] != nil {
		t.Fatalf("ProjectLists = %v, %v", lists, err)
	}
	// A member's empty list is an empty page, not a missing one.
	empty, err := db.CreateWorkspace(ctx, alice, "Empty")
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := store.NewPage(nil, 20, nil, store.ProjectsScope(empty.ID, true))
	lists, err = db.ProjectLists(ctx, alice.ID, []store.ProjectList{{WorkspaceID: empty.ID, IncludeArchived: true, Page: ep}})
	if err != nil || lists[0] == nil || len(lists[0].Edges) != 0 || lists[0].PageInfo.HasNextPage {
		t.Fatalf("empty list = %+v, %v", lists[0], err)
	}
}

func TestRecordLoginFailureOutlivesTheUnitOfWork(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	u := mkUser(t, db, "dana@example.com")
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if err := db.RecordLoginFailure(ctx, u, "wrong password"); err != nil {
			return err
		}
		return store.ErrBadCredentials // the mutation fails: its transaction rolls back
	})
	if err != store.ErrBadCredentials {
		t.Fatalf("err = %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = 'user.login_failed' AND entity_id = $1 AND actor_id::text = $1`, u.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d login_failed events after the rollback, want 1", n)
	}
}

// Revoking a token records one user.logged_out; revoking it again (two
// logouts racing with one token), or revoking another user's token, changes
// and records nothing.
func TestRevokeTokenRecordsOneLogout(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	u, other := mkUser(t, db, "erin@example.com"), mkUser(t, db, "finn@example.com")
	hash := []byte("0123456789abcdef0123456789abcdef")
	if _, err := db.Pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 day')`, hash, u.ID); err != nil {
		t.Fatal(err)
	}
	for _, who := range []*store.User{other, u, u} {
		if err := db.RevokeToken(ctx, who, hash); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	var meta string
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), min(metadata::text) FROM audit_events
		WHERE action = 'user.logged_out' AND entity_id = $1 AND actor_id::text = $1`, u.ID).Scan(&n, &meta); err != nil {
		t.Fatal(err)
	}
	if n != 1 || meta != "{}" {
		t.Fatalf("%d user.logged_out events (metadata %s), want 1 with {}", n, meta)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d events in all, want 1 (%v)", n, err)
	}
}

// An account's creation (the user, its first token and user.registered) and
// a session's (the token, a rehashed password, user.logged_in) are one round
// trip each with their COMMIT; a taken e-mail is CONFLICT from that round
// trip, and leaves no token behind. The user returned is the user stored.
func TestAccountWritesAreOneRoundTrip(t *testing.T) {
	t.Parallel()
	db, pool, rec := tracedDB(t)
	ctx := t.Context()
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	rec.take()
	u, err := db.CreateUser(ctx, " New@Example.com ", "New", "hash-1", []byte("token-1"))
	if err != nil {
		t.Fatal(err)
	}
	if trips := rec.take(); len(trips) != 1 || !strings.HasPrefix(trips[0], "begin ; insert into users") ||
		!strings.Contains(trips[0], "insert into tokens") || !strings.HasSuffix(trips[0], "; commit") {
		t.Fatalf("register: round trips %q, want one: the user, its token, its event, COMMIT", trips)
	}
	stored, err := db.UserByEmail(ctx, "new@example.com")
	if err != nil || !stored.CreatedAt.Equal(u.CreatedAt) {
		t.Fatalf("registered at %v, stored %v (%v)", u.CreatedAt, stored.CreatedAt, err)
	}
	if stored.CreatedAt = u.CreatedAt; !reflect.DeepEqual(u, stored) {
		t.Fatalf("registered %+v, stored %+v (%v)", u, stored, err)
	}
	if _, err := db.CreateUser(ctx, "new@example.com", "Again", "hash-2", []byte("token-2")); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("a taken e-mail: %v, want CONFLICT", err)
	}
	rec.take()
	if err := db.CreateSession(ctx, u, []byte("token-3"), "hash-3"); err != nil {
		t.Fatal(err)
	}
	if trips := rec.take(); len(trips) != 1 || !strings.HasPrefix(trips[0], "begin ; insert into tokens") ||
		!strings.Contains(trips[0], "update users") || !strings.HasSuffix(trips[0], "; commit") {
		t.Fatalf("session: round trips %q, want one: the token, the rehash, the event, COMMIT", trips)
	}
	var tokens int
	var hash string
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tokens WHERE user_id = $1), password_hash FROM users WHERE id = $1`,
		u.ID).Scan(&tokens, &hash); err != nil || tokens != 2 || hash != "hash-3" {
		t.Fatalf("%d tokens, hash %q (%v): want 2 and the rehash", tokens, hash, err)
	}
}
