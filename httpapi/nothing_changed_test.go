package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/store/storetest"
)

// refusal is a request the API refuses with an error that says, or means,
// that nothing was changed.
type refusal struct {
	name   string
	send   func(t *testing.T) *apitest.Response
	code   string
	status int // 0: the transport's usual 200 (application/json: also for parse, validation and cost refusals)
}

// checkRefusals sends each refusal and checks its code and status, that it
// answered no data, and that no row of any table of env changed.
func checkRefusals(t *testing.T, env *apitest.Env, refusals []refusal) {
	t.Helper()
	for _, r := range refusals {
		before := storetest.Snapshot(t, env.DB.Pool)
		res := r.send(t)
		status := r.status
		if status == 0 {
			status = http.StatusOK
		}
		if res.Code() != r.code || res.Status != status {
			t.Errorf("%s: HTTP %d %s, want %d %s: %.400s", r.name, res.Status, res.Code(), status, r.code, res.Raw)
		}
		if d := string(res.Body.Data); d != "" && d != "null" {
			t.Errorf("%s: answered data %s", r.name, d)
		}
		storetest.AssertUnchanged(t, env.DB.Pool, before, r.name)
	}
}

// Every error whose message or contract says nothing changed leaves every
// table as it was: idempotency refusals, several fields sharing a key, keys
// that cannot be honoured, bad characters anywhere in an operation, parse and
// validation failures, method and media type refusals, a bad token.
func TestRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	fx := newFixture(t, env)
	as := func(q string, vars map[string]any, headers ...string) func(t *testing.T) *apitest.Response {
		return func(t *testing.T) *apitest.Response { return env.Post(t, fx.token, q, vars, headers...) }
	}
	anon := func(q string, vars map[string]any, headers ...string) func(t *testing.T) *apitest.Response {
		return func(t *testing.T) *apitest.Response { return env.Post(t, "", q, vars, headers...) }
	}
	raw := func(method, path, contentType string, body []byte) func(t *testing.T) *apitest.Response {
		return func(t *testing.T) *apitest.Response {
			req, err := http.NewRequest(method, env.Server.URL+path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+fx.token)
			if contentType != "" {
				req.Header.Set("Content-Type", contentType)
			}
			return env.Do(t, req)
		}
	}
	// A key with a record, for the refusals of its reuse.
	if r := env.Post(t, fx.token, `mutation { createWorkspace(input: {name: "used"}, idempotencyKey: "used") { id } }`, nil); r.Code() != "" {
		t.Fatalf("first use of the key: %s", r.Raw)
	}
	createTask := fmt.Sprintf(`createTask(input: {projectId: %q, title: "t"}`, fx.project)
	twoTasks := `mutation($k: String, $t: String!) { a: ` + createTask + `) { id } b: createTask(input: {projectId: "` +
		fx.project + `", title: $t}, idempotencyKey: $k) { id } }`
	checkRefusals(t, env, []refusal{
		{"the key reused for other arguments", as(`mutation { createWorkspace(input: {name: "other"}, idempotencyKey: "used") { id } }`, nil),
			"IDEMPOTENCY_KEY_REUSED", 0},
		{"the key reused for another mutation", as(`mutation { `+createTask+`, idempotencyKey: "used") { id } }`, nil),
			"IDEMPOTENCY_KEY_REUSED", 0},
		{"one key for two fields (issue #13)", as(`mutation { a: createWorkspace(input: {name: "n1"}, idempotencyKey: "k") { id }
			b: createWorkspace(input: {name: "n2"}, idempotencyKey: "k") { id } }`, nil), "BAD_USER_INPUT", 0},
		{"one key for two identical fields", as(`mutation { a: createWorkspace(input: {name: "n1"}, idempotencyKey: "k") { id }
			b: createWorkspace(input: {name: "n1"}, idempotencyKey: "k") { name } }`, nil), "BAD_USER_INPUT", 0},
		{"one key for two fields, by variables", as(`mutation($k: String) { a: `+createTask+`, idempotencyKey: $k) { id }
			b: deleteTask(id: "`+fx.task+`", idempotencyKey: $k) }`, map[string]any{"k": "k"}), "BAD_USER_INPUT", 0},
		{"one key for two fields, through a fragment", as(`mutation { a: createWorkspace(input: {name: "n1"}, idempotencyKey: "k") { id }
			...F } fragment F on Mutation { b: `+createTask+`, idempotencyKey: "k") { id } }`, nil), "BAD_USER_INPUT", 0},
		{"the header for two fields", as(`mutation { a: createWorkspace(input: {name: "n1"}) { id }
			b: createWorkspace(input: {name: "n2"}) { id } }`, nil, "Idempotency-Key", "h"), "BAD_USER_INPUT", 0},
		{"the header for a field without a key", as(`mutation { logout }`, nil, "Idempotency-Key", "h"), "BAD_USER_INPUT", 0},
		{"the header for login, signed in", as(`mutation { login(email: "`+fx.ownerEmail+`", password: "`+fixturePassword+`") { token } }`,
			nil, "Idempotency-Key", "h"), "BAD_USER_INPUT", 0},
		{"a malformed header", as(`mutation { createWorkspace(input: {name: "n"}) { id } }`, nil,
			"Idempotency-Key", strings.Repeat("k", 256)), "BAD_USER_INPUT", 0},
		{"a malformed header, not ASCII", as(`mutation { createWorkspace(input: {name: "n"}) { id } }`, nil,
			"Idempotency-Key", "ключ"), "BAD_USER_INPUT", 0},
		{"a malformed key in the second field", as(twoTasks, map[string]any{"k": "", "t": "t"}), "BAD_USER_INPUT", 0},
		{"an anonymous register with a header", anon(`mutation { register(input: {email: "new@example.com", password: "long enough", name: "N"}) { token } }`,
			nil, "Idempotency-Key", "h"), "UNAUTHENTICATED", 0},
		{"an anonymous login with a header", anon(`mutation { login(email: "`+fx.ownerEmail+`", password: "`+fixturePassword+`") { token } }`,
			nil, "Idempotency-Key", "h"), "UNAUTHENTICATED", 0},
		{"an anonymous key after a register", anon(`mutation { register(input: {email: "new@example.com", password: "long enough", name: "N"}) { token }
			createWorkspace(input: {name: "n"}, idempotencyKey: "k") { id } }`, nil), "UNAUTHENTICATED", 0},
		{"a NUL in the second field's variable", as(twoTasks, map[string]any{"k": "k2", "t": "a\x00b"}), "BAD_USER_INPUT", 0},
		{"a NUL in the second field's literal", as(`mutation { a: createWorkspace(input: {name: "n1"}) { id }
			b: createWorkspace(input: {name: "n\u0000"}) { id } }`, nil), "BAD_USER_INPUT", 0},
		{"a NUL in a braced escape", as(`mutation { createWorkspace(input: {name: "n\u{0}"}) { id } }`, nil), "BAD_USER_INPUT", 0},
		{"a NUL in a variable's default", as(`mutation($n: String = "\u0000") { a: createWorkspace(input: {name: "ok"}) { id }
			b: createWorkspace(input: {name: $n}) { id } }`, nil), "BAD_USER_INPUT", 0},
		{"a validation failure after a valid field", as(`mutation { a: createWorkspace(input: {name: "n1"}) { id } b: nope }`, nil),
			"GRAPHQL_VALIDATION_FAILED", 0},
		{"a variable of the wrong type", as(`mutation($n: String!) { createWorkspace(input: {name: $n}) { id } }`, map[string]any{"n": map[string]any{"a": 1}}),
			"GRAPHQL_VALIDATION_FAILED", 0},
		{"a parse failure", as(`mutation { createWorkspace(input: {name: "n1"}) { id }`, nil), "GRAPHQL_PARSE_FAILED", 0},
		{"a mutation by GET", func(t *testing.T) *apitest.Response {
			return get(t, env, `mutation { createWorkspace(input: {name: "n"}) { id } }`, nil, "Authorization", "Bearer "+fx.token)
		}, "BAD_USER_INPUT", 405},
		{"a mutation by GET over SSE", func(t *testing.T) *apitest.Response {
			r := get(t, env, `mutation { createWorkspace(input: {name: "n"}) { id } }`, nil, "Authorization", "Bearer "+fx.token,
				"Accept", "text/event-stream")
			if r.Header.Get("Allow") != "POST" {
				t.Errorf("a mutation by GET over SSE: Allow %q, want POST", r.Header.Get("Allow"))
			}
			return r
		}, "BAD_USER_INPUT", 405},
		{"a GET with a NUL in its variables", func(t *testing.T) *apitest.Response {
			return get(t, env, `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": "\x00"}, "Authorization", "Bearer "+fx.token)
		}, "BAD_USER_INPUT", 0},
		{"PUT", raw(http.MethodPut, "/query", "application/json", []byte(`{"query":"mutation { logout }"}`)), "GRAPHQL_PARSE_FAILED", 405},
		{"not JSON", raw(http.MethodPost, "/query", "text/plain", []byte(`mutation { logout }`)), "GRAPHQL_PARSE_FAILED", 415},
		{"invalid UTF-8 in a variable", raw(http.MethodPost, "/query", "application/json",
			[]byte(`{"query":"mutation($n: String!) { createWorkspace(input: {name: $n}) { id } }","variables":{"n":"a`+"\xff"+`"}}`)),
			"GRAPHQL_PARSE_FAILED", 400},
		{"a body over the limit", raw(http.MethodPost, "/query", "application/json",
			[]byte(`{"query":"mutation { logout }","variables":{"x":"`+strings.Repeat("x", 2<<20)+`"}}`)), "GRAPHQL_PARSE_FAILED", 413},
		{"a bad token", func(t *testing.T) *apitest.Response {
			return env.Post(t, "nope", `mutation { createWorkspace(input: {name: "n"}) { id } }`, nil)
		}, "UNAUTHENTICATED", 401},
		{"an export by POST", raw(http.MethodPost, "/audit/export?workspaceId="+fx.workspace, "", nil), "BAD_USER_INPUT", 405},
		{"an export's file by DELETE", raw(http.MethodDelete, "/audit/exports/00000000-0000-0000-0000-000000000000", "", nil), "BAD_USER_INPUT", 405},
		{"an attachment by PUT", raw(http.MethodPut, "/attachments/00000000-0000-0000-0000-000000000000", "", nil), "BAD_USER_INPUT", 405},
		{"an export with a NUL", raw(http.MethodGet, "/audit/export?workspaceId="+fx.workspace+"&actions=%00", "", nil), "BAD_USER_INPUT", 400},
		{"an export with invalid UTF-8", raw(http.MethodGet, "/audit/export?workspaceId="+fx.workspace+"&entityType=%FF", "", nil),
			"BAD_USER_INPUT", 400},
	})
}

// The limiter's refusals change nothing: an operation over MAX_QUERY_COST, one
// over the budget, a login over its limit (no user.login_failed event).
func TestLimiterRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	once := ratelimit.Limit{Points: 1, Window: time.Hour}
	env, _ := limited(t, ratelimit.Config{Points: 20, Window: time.Hour, MaxCost: 15, LoginPerIP: once}, nil, "")
	fx := newFixture(t, env)
	login := `mutation { login(email: "` + fx.ownerEmail + `", password: "wrong password") { token } }`
	// Spend the login attempt and most of the budget (11 of 20 points).
	if r := env.Post(t, "", login, nil); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("first login: %s", r.Raw)
	}
	var spend strings.Builder
	for i := range 11 {
		fmt.Fprintf(&spend, " m%d: me { id }", i) // 1 point each
	}
	if r := env.Post(t, fx.token, "{"+spend.String()+" }", nil); r.Code() != "" {
		t.Fatalf("spending: %s", r.Raw)
	}
	checkRefusals(t, env, []refusal{
		{"an operation over MAX_QUERY_COST", func(t *testing.T) *apitest.Response {
			return env.Post(t, fx.token, `mutation { createWorkspace(input: {name: "n"}) { id members { user { id } } } }`, nil)
		}, "QUERY_TOO_COSTLY", 0},
		{"a mutation over the budget", func(t *testing.T) *apitest.Response {
			return env.Post(t, fx.token, `mutation { createWorkspace(input: {name: "n"}) { id } }`, nil)
		}, "RATE_LIMITED", 429},
		{"a login over its limit", func(t *testing.T) *apitest.Response { return env.Post(t, "", login, nil) },
			"RATE_LIMITED", 429},
		// Refused for what they are, before the limiter: not charged, and not
		// RATE_LIMITED or QUERY_TOO_COSTLY though the budget could not pay
		// for them.
		{"a NUL, over the budget", func(t *testing.T) *apitest.Response {
			return env.Post(t, fx.token, `mutation { createWorkspace(input: {name: "\u0000"}) { id } }`, nil)
		}, "BAD_USER_INPUT", 0},
		{"a query with a NUL, within the budget", func(t *testing.T) *apitest.Response {
			return env.Post(t, fx.token, `{ task(id: "\u0000") { id } }`, nil)
		}, "BAD_USER_INPUT", 0},
		{"one key for two fields, over the budget", func(t *testing.T) *apitest.Response {
			return env.Post(t, fx.token, `mutation { a: logout b: createWorkspace(input: {name: "n"}, idempotencyKey: "k") { id }
				c: createWorkspace(input: {name: "n"}, idempotencyKey: "k") { id } }`, nil)
		}, "BAD_USER_INPUT", 0},
	})
	r := env.Post(t, fx.token, `{ rateLimit { remaining cost } }`, nil)
	if !strings.Contains(string(r.Body.Data), `"remaining":8,"cost":1`) {
		t.Errorf("the refusals were charged: 9 points were left, %s", r.Raw)
	}
}
