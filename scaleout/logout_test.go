package scaleout_test

import (
	"testing"
	"time"

	"taskflow/store"
	"taskflow/store/storetest"
)

// A logged-out token is refused by every instance within one second: at once by
// the instance that logged it out, and by another instance that was serving it
// (and remembered it, so that its requests needed no database round trip for
// the token) once store.SessionTTL has passed.
func TestLogoutReachesEveryInstanceWithinASecond(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	a, b := newInstance(t, "DATABASE_URL="+dbURL), newInstance(t, "DATABASE_URL="+dbURL)
	a.start()
	b.start()
	_, token := newUser(t, pool, "leaver")
	me := `{ me { id } }`
	for range 3 {
		a.mustPost(t, token, me, nil)
		b.mustPost(t, token, me, nil)
	}
	if r := a.mustPost(t, token, `mutation { logout }`, nil); string(r.Body.Data) != `{"logout":true}` {
		t.Fatalf("logout: %s", r)
	}
	if r, err := a.post(token, me, nil); err != nil || r.Status != 401 || r.code() != "UNAUTHENTICATED" {
		t.Fatalf("the instance that logged the token out: %v %v", err, r)
	}
	time.Sleep(time.Second)
	if r, err := b.post(token, me, nil); err != nil || r.Status != 401 || r.code() != "UNAUTHENTICATED" {
		t.Fatalf("another instance a second after the logout: %v %v", err, r)
	}
	if store.SessionTTL >= time.Second {
		t.Fatalf("store.SessionTTL is %s", store.SessionTTL)
	}
}
