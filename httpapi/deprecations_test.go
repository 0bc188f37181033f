package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
)

// deprecatedUses reads taskflow_deprecated_field_uses_total from /metrics, by
// field; a series absent from the exposition is missing from the map.
func deprecatedUses(t *testing.T, env *apitest.Env) map[string]float64 {
	t.Helper()
	res, err := env.Server.Client().Get(env.Server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^taskflow_deprecated_field_uses_total\{field="([^"]*)"\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]] = v
	}
	return out
}

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An operation that uses deprecated fields or arguments (through fragments
// too) is counted once per field in taskflow_deprecated_field_uses_total,
// named in the access log, and its response carries
// extensions.deprecations with each field's reason; one that uses none is
// not counted and its response has no such extension. Every deprecated
// field and argument of the schema has its series, at 0 until used.
func TestDeprecatedFieldUsesAreCountedAndReported(t *testing.T) {
	t.Parallel()
	var accessLog lockedBuffer
	env := apitest.New(t, func(o *httpapi.Options) {
		o.AccessLog = slog.New(slog.NewTextHandler(&accessLog, nil))
	})
	u := env.SignUp(t, "ann")
	ws := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)
	var created struct{ CreateWorkspace struct{ ID string } }
	if err := json.Unmarshal(ws.Body.Data, &created); err != nil || created.CreateWorkspace.ID == "" {
		t.Fatalf("createWorkspace: %s", ws.Raw)
	}

	before := deprecatedUses(t, env)
	for _, f := range []string{"Workspace.members", "User.workspaces", "Mutation.addMember"} {
		if v, ok := before[f]; !ok || v != 0 {
			t.Errorf("before any use: %s = %v (present %v), want a series at 0", f, v, ok)
		}
	}

	// Not deprecated: nothing counted, no extension.
	r := env.Post(t, u.Token, `{ me { workspacesConnection(first: 5) { nodes { id membersConnection { nodes { role } } } } } }`, nil)
	if r.Code() != "" || r.Body.Extensions["deprecations"] != nil {
		t.Fatalf("connections: %s, want no deprecations", r.Raw)
	}

	// Both lists, one of them twice and once through a fragment: each counted once.
	r = env.Post(t, u.Token, `query Old($w: ID!) {
		me { workspaces { id ...M } }
		workspace(id: $w) { members { role } }
	}
	fragment M on Workspace { members { user { id } } }`, map[string]any{"w": created.CreateWorkspace.ID})
	if r.Code() != "" {
		t.Fatalf("lists: %s", r.Raw)
	}
	var ext struct {
		Extensions struct {
			Deprecations []struct{ Field, Reason string }
		}
	}
	if err := json.Unmarshal(r.Raw, &ext); err != nil {
		t.Fatal(err)
	}
	got := ext.Extensions.Deprecations
	if len(got) != 2 || got[0].Field != "User.workspaces" || got[1].Field != "Workspace.members" ||
		!strings.Contains(got[0].Reason, "workspacesConnection") || !strings.Contains(got[1].Reason, "membersConnection") {
		t.Errorf("extensions.deprecations = %+v, want User.workspaces and Workspace.members with their reasons", got)
	}
	if r.Body.Extensions["cost"] == nil {
		t.Errorf("extensions.cost missing beside deprecations: %s", r.Raw)
	}

	// A deprecated mutation, refused as it always is, still counts.
	r = env.Post(t, u.Token, `mutation($w: ID!) { addMember(workspaceId: $w, email: "x@example.com", role: MEMBER) { role } }`,
		map[string]any{"w": created.CreateWorkspace.ID})
	if r.Code() != "FORBIDDEN" || !bytes.Contains(r.Raw, []byte(`"Mutation.addMember"`)) {
		t.Errorf("addMember: %s, want FORBIDDEN with its deprecation", r.Raw)
	}

	after := deprecatedUses(t, env)
	for f, want := range map[string]float64{"Workspace.members": 1, "User.workspaces": 1, "Mutation.addMember": 1} {
		if after[f]-before[f] != want {
			t.Errorf("%s counted %v times, want %v", f, after[f]-before[f], want)
		}
	}
	if !strings.Contains(accessLog.String(), `operation=Old outcome=ok deprecated=User.workspaces,Workspace.members`) {
		t.Errorf("access log without the deprecated fields:\n%s", accessLog.String())
	}
}

// An operation refused after its document and variables were found valid
// (over its cost, over the budget, a string the database cannot store, a
// mutation by GET, over plain HTTP or SSE) is counted as one that ran, named
// in the access log, and its answer, a 429's too, carries
// extensions.deprecations: it is a client using those fields all the same.
// A document or variables refused as invalid is neither counted nor told.
func TestRefusedOperationsCountTheirDeprecatedUses(t *testing.T) {
	t.Parallel()
	var accessLog lockedBuffer
	env, _ := limited(t, ratelimit.Config{Points: 5}, nil, "", func(o *httpapi.Options) {
		o.AccessLog = slog.New(slog.NewTextHandler(&accessLog, nil))
	})
	u := env.NewUser(t, "ann")
	auth := []string{"Authorization", "Bearer " + u.Token}
	told := func(r *apitest.Response) []string {
		t.Helper()
		var ext struct {
			Extensions struct {
				Deprecations []struct{ Field, Reason string }
			}
		}
		if err := json.Unmarshal(r.Raw, &ext); err != nil {
			t.Fatalf("%s: %v", r.Raw, err)
		}
		var out []string
		for _, d := range ext.Extensions.Deprecations {
			if d.Reason == "" {
				t.Errorf("%s without its reason: %s", d.Field, r.Raw)
			}
			out = append(out, d.Field)
		}
		return out
	}
	before := deprecatedUses(t, env)
	want := map[string]float64{}
	for _, c := range []struct {
		name   string
		send   func() *apitest.Response
		status int
		code   string
		fields []string // counted and told
	}{
		{"over MAX_QUERY_COST", func() *apitest.Response {
			return env.Post(t, u.Token, `query Costly { me { workspaces { members { user { id } } } } }`, nil)
		}, http.StatusOK, "QUERY_TOO_COSTLY", []string{"User.workspaces", "Workspace.members"}},
		{"a NUL in a variable", func() *apitest.Response {
			return env.Post(t, u.Token, `query Nul($w: ID!) { workspace(id: $w) { members { role } } }`, map[string]any{"w": "a\x00b"})
		}, http.StatusOK, "BAD_USER_INPUT", []string{"Workspace.members"}},
		{"a mutation by GET", func() *apitest.Response {
			return get(t, env, `mutation Add { addMember(workspaceId: "w", email: "x@example.com", role: MEMBER) { role } }`, nil, auth...)
		}, http.StatusMethodNotAllowed, "BAD_USER_INPUT", []string{"Mutation.addMember"}},
		{"a mutation by GET over SSE", func() *apitest.Response {
			return get(t, env, `mutation AddSSE { addMember(workspaceId: "w", email: "x@example.com", role: MEMBER) { role } }`, nil,
				append(auth, "Accept", "text/event-stream")...)
		}, http.StatusMethodNotAllowed, "BAD_USER_INPUT", []string{"Mutation.addMember"}},
		{"invalid", func() *apitest.Response {
			return env.Post(t, u.Token, `query Invalid { me { workspaces { nope } } }`, nil)
		}, http.StatusOK, "GRAPHQL_VALIDATION_FAILED", nil},
		{"variables that do not coerce", func() *apitest.Response {
			return env.Post(t, u.Token, `query NoVar($w: ID!) { workspace(id: $w) { members { role } } }`, nil)
		}, http.StatusOK, "GRAPHQL_VALIDATION_FAILED", nil},
		{"budget spent", func() *apitest.Response {
			for i := 0; i < 5; i++ {
				if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
					t.Fatalf("query %d: %d %s", i, r.Status, r.Raw)
				}
			}
			return env.Post(t, u.Token, `query Spent { me { workspaces { id } } }`, nil)
		}, http.StatusTooManyRequests, "RATE_LIMITED", []string{"User.workspaces"}},
	} {
		r := c.send()
		if r.Status != c.status || r.Code() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.Status, r.Raw, c.status, c.code)
			continue
		}
		if got := told(r); !slices.Equal(got, c.fields) {
			t.Errorf("%s: extensions.deprecations %v, want %v: %s", c.name, got, c.fields, r.Raw)
		}
		for _, f := range c.fields {
			want[f]++
		}
	}
	after := deprecatedUses(t, env)
	for _, f := range []string{"User.workspaces", "Workspace.members", "Mutation.addMember"} {
		if got := after[f] - before[f]; got != want[f] {
			t.Errorf("%s counted %v times, want %v", f, got, want[f])
		}
	}
	for _, line := range []string{"operation=Costly outcome=QUERY_TOO_COSTLY deprecated=User.workspaces,Workspace.members",
		"operation=Spent outcome=RATE_LIMITED deprecated=User.workspaces"} {
		if !strings.Contains(accessLog.String(), line) {
			t.Errorf("access log without %q:\n%s", line, accessLog.String())
		}
	}
	if strings.Contains(accessLog.String(), "operation=NoVar outcome=GRAPHQL_VALIDATION_FAILED deprecated=") {
		t.Errorf("access log names the uses of an operation refused as invalid:\n%s", accessLog.String())
	}
}

// An operation refused over graphql-ws after its document and variables
// were found valid (over MAX_QUERY_COST, over the budget) is answered, as over HTTP and SSE, with its
// extensions.deprecations beside its errors: a "next" message whose payload
// is the body a 429 or a refused POST has (it had only errors); the legacy
// graphql-ws protocol's "data" message too. An operation that uses nothing
// deprecated has no extensions.
func TestWebSocketRefusalsCarryTheirDeprecations(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Points: 5}, nil, "")
	u := env.NewUser(t, "ann")
	init := map[string]any{"Authorization": "Bearer " + u.Token}
	ws := apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{Init: init})
	legacy := apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{Init: init, Subprotocol: "graphql-ws"})
	refusal := func(w *apitest.WS, id, query string, vars map[string]any, next string) (code string, deprecated []string, raw string) {
		t.Helper()
		if next == "data" {
			p, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
			w.Send(apitest.WSMessage{Type: "start", ID: id, Payload: p})
		} else {
			w.Subscribe(id, query, vars)
		}
		m := w.Next()
		for m.Type == "ka" { // the legacy protocol's keep-alive
			m = w.Next()
		}
		var p struct {
			Data       json.RawMessage
			Errors     []struct{ Extensions map[string]any }
			Extensions struct {
				Deprecations []struct{ Field, Reason string }
			}
		}
		if m.Type != next || m.ID != id || json.Unmarshal(m.Payload, &p) != nil || len(p.Errors) == 0 ||
			len(p.Data) != 0 && string(p.Data) != "null" {
			t.Fatalf("%s: %s %s %s, want a %q refusal", id, m.Type, m.ID, m.Payload, next)
		}
		for _, d := range p.Extensions.Deprecations {
			if d.Reason == "" {
				t.Errorf("%s: %s without its reason", id, d.Field)
			}
			deprecated = append(deprecated, d.Field)
		}
		end := w.Next()
		for end.Type == "ka" {
			end = w.Next()
		}
		if end.Type != "complete" || end.ID != id {
			t.Fatalf("%s: then %+v, want complete", id, end)
		}
		code, _ = p.Errors[0].Extensions["code"].(string)
		return code, deprecated, string(m.Payload)
	}
	for _, c := range []struct {
		id, query string
		vars      map[string]any
		code      string
		fields    []string
	}{
		{"costly", `query Costly { me { workspaces { members { user { id } } } } }`, nil,
			"QUERY_TOO_COSTLY", []string{"User.workspaces", "Workspace.members"}},
		{"plain-costly", `query PlainCostly { me { workspacesConnection(first: 100) { nodes { membersConnection(first: 100) { nodes { user { id } } } } } } }`, nil,
			"QUERY_TOO_COSTLY", nil},
	} {
		for _, w := range []struct {
			conn *apitest.WS
			next string
		}{{ws, "next"}, {legacy, "data"}} {
			code, got, raw := refusal(w.conn, c.id, c.query, c.vars, w.next)
			if code != c.code || !slices.Equal(got, c.fields) {
				t.Errorf("%s over %s: %s %v, want %s %v: %s", c.id, w.next, code, got, c.code, c.fields, raw)
			}
		}
	}
	// The budget spent: RATE_LIMITED, told the same.
	for i := 0; i < 5; i++ {
		if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
			t.Fatalf("query %d: %d %s", i, r.Status, r.Raw)
		}
	}
	if code, got, raw := refusal(ws, "spent", `query Spent { me { workspaces { id } } }`, nil, "next"); code != "RATE_LIMITED" ||
		!slices.Equal(got, []string{"User.workspaces"}) {
		t.Errorf("budget spent: %s %v: %s, want RATE_LIMITED with User.workspaces", code, got, raw)
	}
}
