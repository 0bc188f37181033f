package store_test

import (
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
	lookups := func() int {
		n := 0
		for _, trip := range rec.take() {
			if strings.Contains(trip, "from tokens t") {
				n++
			}
		}
		return n
	}
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
