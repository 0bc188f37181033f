package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"taskflow/egress"
	"taskflow/store"
	"taskflow/webhook"
)

// After registration a name may come to resolve to an internal address
// (DNS rebinding, a CNAME to an internal name) or to nothing: the attempt
// is refused, and its lastError, which the workspace's admins read, names
// neither the internal address nor the server's DNS resolver, and does not
// tell the two apart. Registered while the policy allowed loopback; the
// service then runs with the strict policy, which refuses it at connect.
func TestLastErrorNamesNoInternalAddress(t *testing.T) {
	t.Parallel()
	e := setup(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the loopback receiver")
	}))
	t.Cleanup(srv.Close)
	private := e.endpoint(t, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1), "project.*")
	missing := e.endpoint(t, srv.URL, "project.*")
	ctx := t.Context()
	// As if its name now resolved to nothing.
	if _, err := e.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET url = 'http://no-such-host.invalid/hook' WHERE id = $1`,
		missing.Endpoint.ID); err != nil {
		t.Fatal(err)
	}
	e.db.Egress = egress.Policy{AllowHTTP: true}
	e.start(t, webhook.Options{RetryBase: webhook.MaxRetryWait})
	if _, err := e.db.CreateProject(ctx, e.owner, e.workspace, "Q", nil); err != nil {
		t.Fatal(err)
	}
	lastError := func(endpoint string) string {
		var s string
		if err := e.db.Pool.QueryRow(ctx, `SELECT coalesce(last_error, '') FROM webhook_deliveries WHERE endpoint_id = $1`,
			endpoint).Scan(&s); err != nil {
			return ""
		}
		return s
	}
	var a, b string
	waitFor(t, "both first attempts to fail", func() bool {
		a, b = lastError(private.Endpoint.ID), lastError(missing.Endpoint.ID)
		return a != "" && b != ""
	})
	for _, leak := range []string{"127.0.0.1", "::1", "lookup", ":53"} {
		if strings.Contains(a, leak) || strings.Contains(b, leak) {
			t.Errorf("lastError shows %q:\n%q\n%q", leak, a, b)
		}
	}
	if x, y := strings.Replace(a, "localhost", "H", 1), strings.Replace(b, "no-such-host.invalid", "H", 1); x != y {
		t.Errorf("a name resolving to a private address and one that does not resolve are told apart:\n%q\n%q", a, b)
	}
	if got := e.deliveries(t, private.Endpoint.ID); got[store.WebhookPending] != 1 {
		t.Errorf("the refused delivery: %v, want PENDING (retried)", got)
	}
}
