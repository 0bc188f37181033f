package webhook_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"taskflow/store"
	"taskflow/webhook"
)

// bodySink records the body of every request it gets, by the event's type.
type bodySink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies map[string][]string
}

func newBodySink(t *testing.T) *bodySink {
	t.Helper()
	s := &bodySink{bodies: map[string][]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var env struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &env)
		s.mu.Lock()
		s.bodies[env.Type] = append(s.bodies[env.Type], string(b))
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// got returns the bodies of the events of type typ received so far.
func (s *bodySink) got(typ string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies[typ]...)
}

// A workspace's endpoint that subscribes to every event (a SIEM, say)
// receives the webhook.* events of its other endpoints, but never another
// endpoint's URL path or query, where a Slack-style integration keeps its
// credential: it gets the URL as scheme://host[:port]/… and its SHA-256.
// The endpoint's own ping does not carry them either.
func TestDeliveriesNeverCarryAnotherEndpointsURLToken(t *testing.T) {
	t.Parallel()
	e := setup(t)
	siem := newBodySink(t)
	e.endpoint(t, siem.srv.URL+"/siem")
	slack := newBodySink(t)
	first := slack.srv.URL + "/services/T000/B000/pathTokenAAAA?token=queryTokenBBBB"
	second := slack.srv.URL + "/services/T111/B111/pathTokenCCCC?sig=queryTokenDDDD"
	tokens := []string{"pathTokenAAAA", "queryTokenBBBB", "pathTokenCCCC", "queryTokenDDDD", "/services"}
	ep := e.endpoint(t, first)
	ctx := t.Context()
	if _, err := e.db.UpdateWebhookEndpoint(ctx, e.owner, ep.Endpoint.ID, store.WebhookEndpointPatch{URL: &second}); err != nil {
		t.Fatal(err)
	}
	if err := e.db.PingWebhookEndpoint(ctx, e.owner, ep.Endpoint.ID); err != nil {
		t.Fatal(err)
	}
	e.start(t, webhook.Options{})
	waitFor(t, "the ping", func() bool { return len(slack.got("webhook.pinged")) == 1 })
	if err := e.db.DeleteWebhookEndpoint(ctx, e.owner, ep.Endpoint.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIEM's webhook.created, updated and deleted", func() bool {
		return len(siem.got("webhook.created")) == 1 && len(siem.got("webhook.updated")) == 1 &&
			len(siem.got("webhook.deleted")) == 1
	})
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	host := strings.TrimPrefix(slack.srv.URL, "http://")
	shown := `"url":"http://` + host + `/…"`
	for _, c := range []struct {
		who, typ string
		body     string
		want     []string
	}{
		{"SIEM", "webhook.created", siem.got("webhook.created")[0], []string{shown, sum(first)}},
		{"SIEM", "webhook.updated", siem.got("webhook.updated")[0], []string{sum(first), sum(second)}},
		{"SIEM", "webhook.deleted", siem.got("webhook.deleted")[0], []string{shown, sum(second)}},
		{"Slack endpoint itself", "webhook.pinged", slack.got("webhook.pinged")[0], []string{shown, sum(second)}},
	} {
		for _, token := range tokens {
			if strings.Contains(c.body, token) {
				t.Errorf("the %s received %q of the Slack endpoint's URL in %s: %s", c.who, token, c.typ, c.body)
			}
		}
		for _, w := range c.want {
			if !strings.Contains(c.body, w) {
				t.Errorf("the %s's %s: %s, want it to hold %s", c.who, c.typ, c.body, w)
			}
		}
	}
}
