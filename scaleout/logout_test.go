package scaleout_test

import (
	"testing"
	"time"

	"taskflow/store"
	"taskflow/store/storetest"
)

// A logged-out token is refused by every instance within one second: at once by
// the instance that logged it out, and by another instance that was serving it
// (and remembered it past store.SessionTTL, so that its requests needed no
// database round trip for the token) once its revocation feed read the change.
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
	time.Sleep(store.SessionTTL + 200*time.Millisecond) // b now trusts its read through its feed
	b.mustPost(t, token, me, nil)
	if r := a.mustPost(t, token, `mutation { logout }`, nil); string(r.Body.Data) != `{"logout":true}` {
		t.Fatalf("logout: %s", r)
	}
	if r, err := a.post(token, me, nil); err != nil || r.Status != 401 || r.code() != "UNAUTHENTICATED" {
		t.Fatalf("the instance that logged the token out: %v %v", err, r)
	}
	loggedOut := time.Now()
	for {
		r, err := b.post(token, me, nil)
		if err == nil && r.Status == 401 && r.code() == "UNAUTHENTICATED" {
			break
		}
		if time.Since(loggedOut) > time.Second {
			t.Fatalf("another instance a second after the logout: %v %v", err, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
