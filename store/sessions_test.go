package store_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"taskflow/errs"
	"taskflow/store"
)

// A bearer token is looked up once in a while, not on every request: what an
// instance read of it (its user, or a refusal) is remembered for
// store.SessionTTL. A token revoked through an instance is refused there at
// once; another instance that remembered it refuses it once SessionTTL has
// passed, within a second.
func TestTokenLookupsAreRemembered(t *testing.T) {
	t.Parallel()
	a, pool, rec := tracedDB(t)
	b := store.New(pool, nil) // a second instance: a memory of its own
	ctx := t.Context()
	u := mkUser(t, a, "sessions@example.com")
	hash := sha256.Sum256([]byte("a token"))
	if err := a.CreateSession(ctx, u, hash[:], ""); err != nil {
		t.Fatal(err)
	}
	lookups := func() int { return tokenReads(rec) }
	rec.take()
	for range 5 {
		for _, db := range []*store.DB{a, b} {
			got, err := db.UserByTokenHash(ctx, hash[:])
			if err != nil || got.ID != u.ID {
				t.Fatalf("lookup: %v %v", got, err)
			}
		}
	}
	if n := lookups(); n != 2 {
		t.Fatalf("%d token queries for 10 lookups on two instances, want one each", n)
	}
	// Unknown tokens are remembered too.
	bogus := sha256.Sum256([]byte("not a token"))
	for range 3 {
		if _, err := a.UserByTokenHash(ctx, bogus[:]); errs.CodeOf(err) != errs.CodeNotFound {
			t.Fatalf("unknown token: %v", err)
		}
	}
	if n := lookups(); n != 1 {
		t.Fatalf("%d token queries for 3 lookups of one unknown token, want 1", n)
	}

	if err := a.RevokeToken(ctx, u, hash[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UserByTokenHash(ctx, hash[:]); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("the revoking instance still accepts the token: %v", err)
	}
	time.Sleep(store.SessionTTL) // what b remembered expires by then
	if _, err := b.UserByTokenHash(ctx, hash[:]); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("another instance accepts a token revoked %s ago: %v", store.SessionTTL, err)
	}
	if store.SessionTTL > time.Second {
		t.Fatalf("SessionTTL %s: a revoked token must be refused everywhere within a second", store.SessionTTL)
	}
}

// CachedUserByTokenHash answers from the instance's memory alone: not known
// for a token it has not read (nor one another instance read), the user (a
// copy) for a token it read valid, known and no user for a token it read
// unknown, for one revoked through it, and for one read valid whose expiry
// has passed since. None of these is a round trip.
func TestCachedUserByTokenHash(t *testing.T) {
	t.Parallel()
	a, pool, rec := tracedDB(t)
	b := store.New(pool, nil) // another instance: a memory of its own
	ctx := t.Context()
	u := mkUser(t, a, "cached@example.com")
	valid, bogus, expiring := sha256.Sum256([]byte("valid")), sha256.Sum256([]byte("bogus")), sha256.Sum256([]byte("expiring"))
	for _, h := range [][32]byte{valid, expiring} {
		if err := a.CreateSession(ctx, u, h[:], ""); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(what string, db *store.DB, h [32]byte, wantUser, wantKnown bool) {
		t.Helper()
		rec.take()
		got, known := db.CachedUserByTokenHash(h[:])
		if known != wantKnown || (got != nil) != wantUser || got != nil && got.ID != u.ID {
			t.Fatalf("%s: user %+v, known %v; want a user %v, known %v", what, got, known, wantUser, wantKnown)
		}
		if n := tokenReads(rec); n != 0 {
			t.Fatalf("%s: %d token reads", what, n)
		}
	}
	// Nothing read yet: not known (UserByTokenHash would ask Postgres).
	cached("a valid token never read", a, valid, false, false)
	cached("an unknown token never read", a, bogus, false, false)

	// Each read below is checked at once: without a revocation feed the
	// instance trusts it for store.SessionTTL (900 ms).
	read := func(h [32]byte, want errs.Code) {
		t.Helper()
		if _, err := a.UserByTokenHash(ctx, h[:]); errs.CodeOf(err) != want {
			t.Fatalf("read: %v, want %q", err, want)
		}
	}
	// Read valid: the user, a copy of what is remembered.
	read(valid, "")
	cached("a valid token read", a, valid, true, true)
	got, _ := a.CachedUserByTokenHash(valid[:])
	got.ID, got.Name = "changed", "changed"
	cached("a valid token read, after its answer was changed", a, valid, true, true)
	cached("a token another instance read", b, valid, false, false)

	// Read unknown: known, no user.
	read(bogus, errs.CodeNotFound)
	cached("an unknown token read", a, bogus, false, true)

	// Read valid, its expiry passed since: known, no user.
	read(expiring, "")
	a.ExpireRemembered(expiring[:])
	cached("a token whose expiry passed since it was read", a, expiring, false, true)

	// Revoked through this instance: known, no user, at once.
	if err := a.RevokeToken(ctx, u, valid[:]); err != nil {
		t.Fatal(err)
	}
	cached("a token revoked through this instance", a, valid, false, true)
}

// With its revocation feed running, an instance goes on trusting what it
// read of a token past store.SessionTTL (no round trip for it), and still
// refuses a token within a second of its change anywhere: a logout served
// by another instance while a long transaction holds the horizon back, a
// token deleted by SQL, a user renamed by SQL. A read of a token whose
// validity ended is refused without a round trip.
func TestRevocationFeedKeepsTokensTrustworthy(t *testing.T) {
	t.Parallel()
	a, pool, rec := tracedDB(t)
	b := store.New(pool, nil)
	ctx := t.Context()
	go a.RunRevocationFeed(ctx)
	go b.RunRevocationFeed(ctx)
	u := mkUser(t, a, "feed@example.com")
	tokens := make([][]byte, 4)
	for i := range tokens {
		h := sha256.Sum256([]byte{byte(i)})
		tokens[i] = h[:]
		if err := a.CreateSession(ctx, u, tokens[i], ""); err != nil {
			t.Fatal(err)
		}
	}
	lookups := func() int { return tokenReads(rec) }
	time.Sleep(2 * store.RevocationPoll) // both feeds have begun
	for _, h := range tokens {
		if _, err := b.UserByTokenHash(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	rec.take()
	time.Sleep(store.SessionTTL + 300*time.Millisecond)
	for _, h := range tokens {
		if _, err := b.UserByTokenHash(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if n := lookups(); n != 0 {
		t.Fatalf("%d token reads %s after the first: the feed should keep them trusted", n, store.SessionTTL+300*time.Millisecond)
	}

	// refusedWithinASecond checks b stops accepting what ok accepts within a
	// second of the change just committed.
	refusedWithinASecond := func(what string, h []byte, ok func(*store.User, error) bool) {
		t.Helper()
		changed := time.Now()
		for {
			got, err := b.UserByTokenHash(ctx, h)
			if !ok(got, err) {
				return
			}
			if time.Since(changed) > time.Second {
				t.Fatalf("%s: still %v %v a second later", what, got, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	valid := func(got *store.User, err error) bool { return err == nil }

	// A transaction with an id, open throughout: the horizon stays behind it.
	long, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(context.Background()) //nolint:errcheck
	if _, err := long.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeToken(ctx, u, tokens[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UserByTokenHash(ctx, tokens[0]); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("the revoking instance: %v", err)
	}
	refusedWithinASecond("logout through another instance", tokens[0], valid)
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := pool.Exec(ctx, `DELETE FROM tokens WHERE token_hash = $1`, tokens[1]); err != nil {
		t.Fatal(err)
	}
	refusedWithinASecond("token deleted by SQL", tokens[1], valid)

	if _, err := pool.Exec(ctx, `UPDATE users SET name = 'renamed' WHERE id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	refusedWithinASecond("user renamed by SQL", tokens[2], func(got *store.User, err error) bool {
		return err == nil && got.Name != "renamed"
	})
	if got, err := b.UserByTokenHash(ctx, tokens[2]); err != nil || got.Name != "renamed" {
		t.Fatalf("after the rename: %v %v", got, err)
	}

	// A revocation whose transaction got its id before polls that ran
	// while it was open, and committed after them.
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(context.Background()) //nolint:errcheck
	if _, err := slow.Exec(ctx, `UPDATE tokens SET revoked_at = now() WHERE token_hash = $1`, tokens[3]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UserByTokenHash(ctx, tokens[3]); err != nil { // remembered valid
		t.Fatal(err)
	}
	time.Sleep(3 * store.RevocationPoll)
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	refusedWithinASecond("revoked by a transaction open across polls", tokens[3], valid)

	// A token that expires while remembered.
	short := sha256.Sum256([]byte("short-lived"))
	if _, err := pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 second')`,
		short[:], u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UserByTokenHash(ctx, short[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	rec.take()
	if _, err := b.UserByTokenHash(ctx, short[:]); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("an expired token: %v", err)
	}
	if n := lookups(); n != 0 {
		t.Fatalf("an expired token remembered as valid cost %d reads", n)
	}
}

// An instance whose revocation feed stopped (here: its context ended; in
// production, Postgres unreachable) trusts what it read of a token for
// store.SessionTTL only.
func TestStoppedRevocationFeedFallsBackToSessionTTL(t *testing.T) {
	t.Parallel()
	db, _, rec := tracedDB(t)
	feedCtx, stop := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { db.RunRevocationFeed(feedCtx); close(stopped) }()
	ctx := t.Context()
	u := mkUser(t, db, "stopped@example.com")
	h := sha256.Sum256([]byte("a token"))
	if err := db.CreateSession(ctx, u, h[:], ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * store.RevocationPoll)
	if _, err := db.UserByTokenHash(ctx, h[:]); err != nil {
		t.Fatal(err)
	}
	stop()
	<-stopped
	time.Sleep(store.SessionTTL + 100*time.Millisecond)
	rec.take()
	if _, err := db.UserByTokenHash(ctx, h[:]); err != nil {
		t.Fatal(err)
	}
	if n := tokenReads(rec); n != 1 {
		t.Fatalf("%d token reads past SessionTTL without a feed, want 1", n)
	}
}

// tokenReads returns how many reads of a token rec recorded since it was last
// taken, and forgets them.
func tokenReads(rec *roundTrips) int {
	n := 0
	for _, trip := range rec.take() {
		if strings.Contains(trip, "from tokens t") {
			n++
		}
	}
	return n
}

// A reader that read a token before the revocation feed's first poll cannot
// trust the feed for it (a change committed before that poll is never read):
// TokenChangedSince says so for any such read, and the watchers are told
// with nil once that poll returned; reads after it are vouched for.
func TestFeedsFirstPollVouchesOnlyForLaterReads(t *testing.T) {
	t.Parallel()
	db, _, _ := tracedDB(t)
	hash := sha256.Sum256([]byte("a token"))
	before := time.Now()
	if db.TokenChangedSince(hash[:], before) {
		t.Fatal("a change reported with no feed running")
	}
	told := make(chan [][]byte, 10)
	stop := db.WatchTokens(func(h [][]byte) { told <- h })
	defer stop()
	go db.RunRevocationFeed(t.Context())
	select {
	case h := <-told:
		if h != nil {
			t.Fatalf("first call %v, want nil", h)
		}
	case <-time.After(10 * time.Second): // a bound for a failure
		t.Fatal("the watcher was not told of the first poll")
	}
	if !db.TokenChangedSince(hash[:], before) {
		t.Fatal("a read before the first poll is vouched for")
	}
	if db.TokenChangedSince(hash[:], time.Now()) {
		t.Fatal("a read after the first poll is not vouched for")
	}
}
