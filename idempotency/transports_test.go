package idempotency_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// A replay is the first answer byte for byte (docs/api.md, "Replays") also on
// a server whose local time zone is not UTC: the first answer of an update is
// the row as pgx read it, the replay the record Postgres wrote as JSON
// ("Z"); pgx read times in time.Local until the store's pools read them in
// UTC (store.UTCTimes). TestRealUpdateReplays runs again in a child process
// with TZ=Europe/Paris (setting time.Local here would race with every
// goroutine that reads the clock).
func TestRealUpdateReplaysOutsideUTC(t *testing.T) {
	t.Parallel()
	if time.Now().Format("-07:00") == "+00:00" && os.Getenv("TZ") == "Europe/Paris" {
		t.Fatal("TZ=Europe/Paris did not take (no /usr/share/zoneinfo?)")
	}
	if os.Getenv("TZ") == "Europe/Paris" {
		return // the child: TestRealUpdateReplays runs in it
	}
	cmd := exec.Command(os.Args[0], "-test.run=^(TestRealUpdateReplays|TestRealUpdateReplaysOutsideUTC)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TZ=Europe/Paris")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRealUpdateReplays ") {
		t.Fatalf("TestRealUpdateReplays in TZ=Europe/Paris: %v\n%s", err, out)
	}
}

// docs/api.md, "Several mutation fields": a header on an operation with
// several mutation fields is refused, nothing runs, unless each of them has
// its own idempotencyKey argument. logout takes none, so the header would be
// ignored where the client counts on it.
func TestHeaderRefusedBesideAFieldWithoutKey(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	r := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "A"}, idempotencyKey: "a") { id } logout }`, nil,
		"Idempotency-Key", "h")
	if r.Code() != "BAD_USER_INPUT" || s.calls.Load() != 0 {
		t.Fatalf("header beside logout: %s (createWorkspace called %d times)", r.Raw, s.calls.Load())
	}
	if me := env.Post(t, u.Token, `{ me { id } }`, nil); me.Code() != "" {
		t.Fatalf("logout ran: %s", me.Raw)
	}
	// __typename is no mutation: the header is the key of the one field.
	r = env.Post(t, u.Token, `mutation { __typename createWorkspace(input: {name: "B"}) { id } }`, nil,
		"Idempotency-Key", "h2")
	if r.Code() != "" || s.calls.Load() != 1 {
		t.Fatalf("header with __typename: %s (createWorkspace called %d times)", r.Raw, s.calls.Load())
	}
}

// A replay is "marked by the response header Idempotent-Replayed: true"
// (docs/api.md) over Server-Sent Events too (a POST with Accept:
// text/event-stream runs mutations): a query's or a mutation's headers are
// sent after it ran.
func TestSSEReplayCarriesTheHeader(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t)
	u := env.NewUser(t, "ann")
	q := `mutation { createWorkspace(input: {name: "A"}, idempotencyKey: "sse") { id } }`
	first := env.Post(t, u.Token, q, nil)
	s := env.OpenSSE(t, u.Token, q, nil)
	ev, _ := s.Next()
	if s.Res.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(ev.Data, string(first.Body.Data)) {
		t.Fatalf("SSE replay: header %q, event %s; first answer %s", s.Res.Header.Get("Idempotent-Replayed"), ev.Data, first.Body.Data)
	}
}

// gqlgen gives every operation of a graphql-ws connection the upgrade
// request's headers, so an Idempotency-Key sent with the upgrade would be the
// key of every mutation on the connection: a second, different mutation
// IDEMPOTENCY_KEY_REUSED, a later identical one answered with the first's
// workspace. The upgrade is refused instead.
func TestWebSocketUpgradeWithAKeyIsRefused(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t)
	u := env.NewUser(t, "ann")
	_, res, err := apitest.TryDialWS(t, env.Server.URL+"/query", apitest.WSOptions{
		Header: http.Header{"Idempotency-Key": {"ws1"}},
		Init:   map[string]any{"Authorization": "Bearer " + u.Token}})
	if err == nil || res == nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("upgrade with Idempotency-Key: %v, %+v; want 400", err, res)
	}
	var body struct {
		Errors []struct {
			Message    string
			Extensions map[string]any
		}
	}
	b, _ := io.ReadAll(res.Body)
	if json.Unmarshal(b, &body) != nil || len(body.Errors) != 1 || body.Errors[0].Extensions["code"] != "BAD_USER_INPUT" ||
		!strings.Contains(body.Errors[0].Message, "idempotencyKey argument") {
		t.Fatalf("refusal: %s", b)
	}
	if workspaces(t, env.DB) != 0 {
		t.Fatal("a workspace was created")
	}
	// Without the header the connection opens.
	apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + u.Token}})
}

// A replay is "marked ... by extensions.idempotency" (docs/api.md,
// "Replays") on every transport. A WebSocket carries many operations under
// one upgrade request, whose context every operation shares: each replay on
// the connection must be listed in its own operation's response, not in the
// list of the first operation that replayed (already sent).
func TestWebSocketReplaysEachCarryTheExtension(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	keys := []string{"ws-k1", "ws-k2", "ws-k3"}
	for _, k := range keys {
		env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "A"}, idempotencyKey: "`+k+`") { id } }`, nil)
	}
	ws := apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + u.Token}})
	for i, k := range keys {
		id := string(rune('a' + i))
		ws.Subscribe(id, `mutation { createWorkspace(input: {name: "A"}, idempotencyKey: "`+k+`") { id } }`, nil)
		m := ws.Next()
		var p struct {
			Extensions struct {
				Idempotency []struct {
					Path     []string
					Key      string
					Replayed bool
				}
			}
		}
		if m.Type != "next" || m.ID != id || json.Unmarshal(m.Payload, &p) != nil {
			t.Fatalf("operation %s (key %s): %s %s", id, k, m.Type, m.Payload)
		}
		if got := p.Extensions.Idempotency; len(got) != 1 || got[0].Key != k || !got[0].Replayed ||
			len(got[0].Path) != 1 || got[0].Path[0] != "createWorkspace" {
			t.Errorf("replay %d (key %s) over one WebSocket: %s; want extensions.idempotency "+
				`[{"path":["createWorkspace"],"key":%q,"replayed":true}]`, i+1, k, m.Payload, k)
		}
		if c := ws.Next(); c.Type != "complete" || c.ID != id {
			t.Fatalf("after %s: %s %s", id, c.Type, c.Payload)
		}
	}
	if n := s.runs.Load(); n != int64(len(keys)) {
		t.Fatalf("createWorkspace ran %d times, want %d (the first calls only)", n, len(keys))
	}
}

// "An upgrade with an Idempotency-Key header is refused" (docs/api.md,
// "Transports"): an empty one too, and one of two lines the first of which
// is empty. Accepted, the connection would refuse each of its mutations, the
// header being every operation's, with a message about the header's form.
func TestWebSocketUpgradeWithAnEmptyKeyIsRefused(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t)
	u := env.NewUser(t, "ann")
	for name, values := range map[string][]string{"empty": {""}, "empty, then a key": {"", "ws1"}} {
		ws, res, err := apitest.TryDialWS(t, env.Server.URL+"/query", apitest.WSOptions{
			Header: http.Header{"Idempotency-Key": values},
			Init:   map[string]any{"Authorization": "Bearer " + u.Token}})
		if err == nil {
			ws.Subscribe("m", `mutation { createWorkspace(input: {name: "A"}) { id } }`, nil)
			m := ws.Next()
			t.Errorf("upgrade with Idempotency-Key %q: accepted; a mutation on it: %s %s", values, m.Type, m.Payload)
			continue
		}
		if res == nil || res.StatusCode != http.StatusBadRequest {
			t.Errorf("upgrade with Idempotency-Key %q (%s): %v, %+v; want 400", values, name, err, res)
		}
	}
	if workspaces(t, env.DB) != 0 {
		t.Fatal("a workspace was created")
	}
}
