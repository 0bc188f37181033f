package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
)

// NewUnguardedHandler leaves out the guards it is told to, and only those.
func TestUnguardedHandlerLeavesOutOnlyWhatIsNamed(t *testing.T) {
	t.Parallel()
	const create = `mutation { createWorkspace(input: {name: "Acme"}, idempotencyKey: "k1") { id } }`
	cases := []struct {
		without               []httpapi.Guard
		rateLimit, idempotent bool
	}{
		{nil, true, true},
		{[]httpapi.Guard{httpapi.GuardRateLimit}, false, true},
		{[]httpapi.Guard{httpapi.GuardIdempotency}, true, false},
		{[]httpapi.Guard{httpapi.GuardRateLimit, httpapi.GuardIdempotency}, false, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.without), func(t *testing.T) {
			t.Parallel()
			env := apitest.NewUnguarded(t, c.without)
			u := env.NewUser(t, "ann")
			first := env.Post(t, u.Token, create, nil)
			again := env.Post(t, u.Token, create, nil)
			if first.Status != http.StatusOK || first.Code() != "" || again.Code() != "" {
				t.Fatalf("without %v: %s / %s", c.without, first.Raw, again.Raw)
			}
			if limited := first.Header.Get("RateLimit") != "" && first.Body.Extensions["cost"] != nil; limited != c.rateLimit {
				t.Errorf("without %v: rate limited %v: %v %s", c.without, limited, first.Header, first.Raw)
			}
			if replayed := again.Header.Get("Idempotent-Replayed") == "true"; replayed != c.idempotent {
				t.Errorf("without %v: replayed %v: %s", c.without, replayed, again.Raw)
			}
		})
	}
}
