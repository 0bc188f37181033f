package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// limited builds an Env whose handler uses a limiter with cfg (in process
// unless rdb is given; a fresh key prefix unless prefix is).
func limited(t *testing.T, cfg ratelimit.Config, rdb redis.UniversalClient, prefix string, opts ...apitest.Option) (*apitest.Env, *ratelimit.Limiter) {
	t.Helper()
	if prefix == "" {
		prefix = ratelimittest.Prefix()
	}
	lim, err := ratelimit.New(ratelimit.Options{Config: cfg, Redis: rdb, KeyPrefix: prefix, Log: quiet,
		Registerer: prometheus.NewRegistry(), ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	opts = append([]apitest.Option{func(o *httpapi.Options) { o.Limiter = lim }}, opts...)
	return apitest.New(t, opts...), lim
}

// post sends a raw POST body with headers.
func post(t *testing.T, env *apitest.Env, body string, headers ...string) *apitest.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, env.Server.URL+"/query", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	apitest.SetHeaders(req, "", headers...)
	return env.Do(t, req)
}

// get sends a GET with the query (and variables) in the URL.
func get(t *testing.T, env *apitest.Env, query string, vars map[string]any, headers ...string) *apitest.Response {
	t.Helper()
	return getWith(t, env, url.Values{"query": {query}}, vars, "", headers...)
}

// getWith sends a GET of /query with v and the variables in the URL, signed
// in with token (none if "") and with headers (name, value, ...).
func getWith(t *testing.T, env *apitest.Env, v url.Values, vars map[string]any, token string, headers ...string) *apitest.Response {
	t.Helper()
	if vars != nil {
		b, _ := json.Marshal(vars)
		v.Set("variables", string(b))
	}
	req, err := http.NewRequest(http.MethodGet, env.Server.URL+"/query?"+v.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	apitest.SetHeaders(req, token, headers...)
	return env.Do(t, req)
}

// rateLimitHeader parses the RateLimit header, `"cost";r=<left>;t=<seconds>`,
// with a structured-field library (RFC 9651), and checks that RateLimit-Policy
// parses too: the transport formats both by hand (docs/decisions).
func rateLimitHeader(t *testing.T, r *apitest.Response) (left, reset int) {
	t.Helper()
	p := costItem(t, r, "RateLimit-Policy", "q", "w")
	if p["q"] <= 0 || p["w"] <= 0 {
		t.Fatalf("RateLimit-Policy %q", r.Header.Get("RateLimit-Policy"))
	}
	v := costItem(t, r, "RateLimit", "r", "t")
	return int(v["r"]), int(v["t"])
}

// costItem parses the header name of r as a List of one Item, the String
// "cost", with exactly the integer parameters params, and returns them.
func costItem(t *testing.T, r *apitest.Response, name string, params ...string) map[string]int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(r.Header.Values(name))
	if err != nil || len(list) != 1 {
		t.Fatalf("%s %q: %v", name, r.Header.Values(name), err)
	}
	item, ok := list[0].(httpsfv.Item)
	if !ok || item.Value != "cost" || !slices.Equal(item.Params.Names(), params) {
		t.Fatalf("%s %q", name, r.Header.Get(name))
	}
	out := map[string]int64{}
	for _, k := range params {
		v, _ := item.Params.Get(k)
		n, ok := v.(int64)
		if !ok || n < 0 {
			t.Fatalf("%s %q: %s is not a non-negative integer", name, r.Header.Get(name), k)
		}
		out[k] = n
	}
	return out
}

// costExt returns extensions.cost.requestedQueryCost and throttleStatus.
func costExt(t *testing.T, r *apitest.Response) (float64, map[string]any) {
	t.Helper()
	c, ok := r.Body.Extensions["cost"].(map[string]any)
	if !ok {
		t.Fatalf("no extensions.cost in %s", r.Raw)
	}
	ts, _ := c["throttleStatus"].(map[string]any)
	return c["requestedQueryCost"].(float64), ts
}

const cheap = `{ rateLimit { limit remaining cost resetAt } }` // cost 1

func TestHeadersExtensionsAndRateLimitField(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	u := env.NewUser(t, "ann")
	r := env.Post(t, u.Token, cheap, nil)
	if r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("status %d: %s", r.Status, r.Raw)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"cost";q=1000;w=60` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if left, reset := rateLimitHeader(t, r); left != 999 || reset != 1 {
		t.Fatalf("RateLimit r=%d t=%d, want r=999 t=1", left, reset)
	}
	cost, ts := costExt(t, r)
	if cost != 1 || ts["maximumAvailable"] != 1000.0 || ts["currentlyAvailable"] != 999.0 ||
		fmt.Sprintf("%.4f", ts["restoreRate"]) != "16.6667" {
		t.Fatalf("extensions.cost %v %v", cost, ts)
	}
	var data struct {
		RateLimit struct {
			Limit, Remaining, Cost int
			ResetAt                time.Time
		}
	}
	if err := json.Unmarshal(r.Body.Data, &data); err != nil {
		t.Fatal(err)
	}
	rl := data.RateLimit
	if rl.Limit != 1000 || rl.Remaining != 999 || rl.Cost != 1 || !rl.ResetAt.After(time.Now().Add(-time.Second)) ||
		rl.ResetAt.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("rateLimit %+v", rl)
	}

	// The budget is per user. (A window of 1000 h keeps the refill out of
	// the exact counts below.)
	env, _ = limited(t, ratelimit.Config{Window: 1000 * time.Hour}, nil, "")
	u, v := env.NewUser(t, "ann"), env.NewUser(t, "bob")
	env.Post(t, u.Token, cheap, nil)
	if left, _ := rateLimitHeader(t, env.Post(t, v.Token, `{ me { workspaces { id } } }`, nil)); left != 998 {
		t.Fatalf("bob's budget after a cost-2 query: %d", left)
	}
	if left, _ := rateLimitHeader(t, env.Post(t, u.Token, `{ me { workspaces { id } } }`, nil)); left != 997 {
		t.Fatalf("ann's budget after a second query: %d", left)
	}

	// Errors carry the headers and the cost too.
	r = env.Post(t, u.Token, `{ me {`, nil)
	if r.Status != http.StatusOK || r.Code() != "GRAPHQL_PARSE_FAILED" || r.Header.Get("RateLimit") == "" {
		t.Fatalf("parse error: %d %v %s", r.Status, r.Header, r.Raw)
	}
	if cost, _ := costExt(t, r); cost != 0 {
		t.Fatalf("a parse error costs %v", cost)
	}
}

func TestRateLimitedAnswer(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Points: 5}, nil, "")
	u := env.NewUser(t, "ann")
	for i := 0; i < 5; i++ {
		if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
			t.Fatalf("query %d: %d %s", i, r.Status, r.Raw)
		}
	}
	r := env.Post(t, u.Token, cheap, nil)
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("6th query: %d %s", r.Status, r.Raw)
	}
	// One point of 5 per minute comes back every 12 s.
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 12 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("Cache-Control %q", r.Header.Get("Cache-Control"))
	}
	var body map[string]any
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"errors": []any{map[string]any{
		"message":    "Too many requests, retry later",
		"extensions": map[string]any{"code": "RATE_LIMITED", "retryAfter": float64(retry)},
	}}}
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("429 body %s", r.Raw)
	}
	if left, _ := rateLimitHeader(t, r); left != 0 {
		t.Fatalf("RateLimit r=%d on a 429", left)
	}
}

func TestQueryTooCostlyChargesNothing(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{MaxCost: 100}, nil, "")
	u := env.NewUser(t, "ann")
	r := env.Post(t, u.Token, `{ me { workspaces { members { user { id } } } } }`, nil)
	if r.Status != http.StatusOK || r.Code() != "QUERY_TOO_COSTLY" || r.Body.Data != nil {
		t.Fatalf("costly query: %d %s", r.Status, r.Raw)
	}
	ext := r.Body.Errors[0]["extensions"].(map[string]any)
	if ext["cost"] != 512.0 || ext["maximum"] != 100.0 {
		t.Fatalf("extensions %v", ext)
	}
	if left, _ := rateLimitHeader(t, r); left != 1000 {
		t.Fatalf("budget after a refused costly query: %d", left)
	}
	// Huge first, literal or variable, is never charged: it is out of
	// 1..100, refused BAD_USER_INPUT before the price is asked for (its
	// price saturates: package cost).
	for _, vars := range []map[string]any{nil, {"n": 1000000}} {
		q := `query($n: Int = 1000000) { searchTasks(workspaceId: "1", query: "x", first: $n) { nodes { id } } }`
		if r := env.Post(t, u.Token, q, vars); r.Status != http.StatusOK || r.Code() != "BAD_USER_INPUT" || r.Body.Data != nil {
			t.Fatalf("huge first: %d %s", r.Status, r.Raw)
		}
	}
	// With application/graphql-response+json the refusal is a 400 (no data).
	if r := env.Post(t, u.Token, `{ me { workspaces { members { user { id } } } } }`, nil,
		"Accept", "application/graphql-response+json"); r.Status != http.StatusBadRequest || r.Code() != "QUERY_TOO_COSTLY" {
		t.Fatalf("costly query, graphql-response: %d %s", r.Status, r.Raw)
	}
	// An operation bigger than the whole budget is QUERY_TOO_COSTLY too, not a 429.
	env2, _ := limited(t, ratelimit.Config{Points: 10, MaxCost: 1000}, nil, "")
	if r := env2.Post(t, "", `{ me { workspaces { members { id: role } } } }`, nil); r.Status != http.StatusOK ||
		r.Code() != "QUERY_TOO_COSTLY" {
		t.Fatalf("over the budget: %d %s", r.Status, r.Raw)
	}
	if left, _ := rateLimitHeader(t, env.Post(t, u.Token, cheap, nil)); left != 999 {
		t.Fatalf("budget after refused queries and one cheap one: %d", left)
	}
}

func TestGETChargesLikePOSTAndRefusesMutations(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Window: 1000 * time.Hour}, nil, "")
	u := env.NewUser(t, "ann")
	auth := []string{"Authorization", "Bearer " + u.Token}
	q := `query($n: Int) { searchTasks(workspaceId: "1", query: "x", first: $n) { nodes { id } } }`
	vars := map[string]any{"n": 7}
	g := get(t, env, q, vars, auth...)
	p := env.Post(t, u.Token, q, vars)
	gc, _ := costExt(t, g)
	pc, _ := costExt(t, p)
	gl, _ := rateLimitHeader(t, g)
	pl, _ := rateLimitHeader(t, p)
	if g.Status != http.StatusOK || gc != 8 || pc != 8 || gl != 992 || pl != 984 {
		t.Fatalf("GET %d cost %v left %d, POST cost %v left %d", g.Status, gc, gl, pc, pl)
	}

	m := get(t, env, `mutation { logout }`, nil, auth...)
	if m.Status != http.StatusMethodNotAllowed || m.Header.Get("Allow") != "POST" || m.Body.Data != nil || len(m.Body.Errors) != 1 {
		t.Fatalf("GET mutation: %d %v %s", m.Status, m.Header, m.Raw)
	}
	if left, _ := rateLimitHeader(t, m); left != 984 {
		t.Fatalf("a GET mutation was charged: %d left", left)
	}
	// Nor does it count as a login attempt.
	for i := 0; i < 12; i++ {
		if r := get(t, env, `mutation { login(email: "a@b.c", password: "x") { token } }`, nil); r.Status != http.StatusMethodNotAllowed {
			t.Fatalf("GET login %d: %d", i, r.Status)
		}
	}
	if r := env.Post(t, "", `mutation { login(email: "a@b.c", password: "x") { token } }`, nil); r.Status == http.StatusTooManyRequests {
		t.Fatalf("GET logins were counted: %s", r.Raw)
	}
}

func TestAliasesAndFragmentsAreCharged(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	u := env.NewUser(t, "ann")
	q := `{ a: me { id } b: me { id } ...F ...F } fragment F on Query { c: me { ...W } } fragment W on User { workspaces { id } }`
	r := env.Post(t, u.Token, q, nil)
	if c, _ := costExt(t, r); c != 2+2*2 {
		t.Fatalf("cost %v: %s", c, r.Raw)
	}
	if left, _ := rateLimitHeader(t, r); left != 994 {
		t.Fatalf("left %d", left)
	}
}

// An explicit null first is no first for the resolvers (the page is the
// argument's default, 20 tasks): it is charged as that page, not as a list of
// the default declared size (10), whether written in the document or sent as a
// variable.
func TestNullFirstIsChargedItsPage(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	u := env.NewUser(t, "ann")
	task := env.NewTask(t, u, "OWNER")
	var project string
	if err := env.DB.Pool.QueryRow(t.Context(), `WITH p AS (SELECT project_id, workspace_id FROM tasks WHERE id = $1)
		INSERT INTO tasks (project_id, workspace_id, title, created_by)
		SELECT project_id, workspace_id, 't' || i, $2 FROM p, generate_series(1, 24) i RETURNING project_id`, task, u.ID).Scan(&project); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query string
		vars  map[string]any
	}{
		{`query($p: ID!) { project(id: $p) { tasks(first: null) { nodes { id } } } }`, map[string]any{"p": project}},
		{`query($p: ID!, $n: Int) { project(id: $p) { tasks(first: $n) { nodes { id } } } }`, map[string]any{"p": project, "n": nil}},
	} {
		r := env.Post(t, u.Token, c.query, c.vars)
		var body struct {
			Project struct {
				Tasks struct{ Nodes []struct{ ID string } }
			}
		}
		if err := json.Unmarshal(r.Body.Data, &body); err != nil || r.Code() != "" {
			t.Fatalf("%s: %v %s", c.query, err, r.Raw)
		}
		n := len(body.Project.Tasks.Nodes)
		if cost, _ := costExt(t, r); n != 20 || cost != float64(1+1+n) {
			t.Fatalf("%s: %d tasks answered, charged %v (want %d)", c.query, n, cost, 1+1+n)
		}
	}
}

func TestFragmentDoublingIsRefusedFast(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	var b strings.Builder
	b.WriteString("query { ...F0 }\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "fragment F%d on Query { a%d: me { id } ...F%d ...F%d }\n", i, i, i+1, i+1)
	}
	b.WriteString("fragment F40 on Query { me { id } }\n")
	body, _ := json.Marshal(map[string]any{"query": b.String()})
	// The client deadline is only a safety net against a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.Server.URL+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	r := env.Do(t, req)
	if r.Status != http.StatusOK || r.Code() != "QUERY_TOO_COSTLY" {
		t.Fatalf("doubling: %d %s", r.Status, r.Raw)
	}
	// And a cycle is a validation error.
	r = post(t, env, `{"query":"{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }"}`)
	if r.Status != http.StatusOK || r.Code() != "GRAPHQL_VALIDATION_FAILED" {
		t.Fatalf("cycle: %d %s", r.Status, r.Raw)
	}
}

func TestBatchedBodiesAreRefused(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	r := post(t, env, `[{"query":"{ rateLimit { cost } }"},{"query":"{ rateLimit { cost } }"}]`)
	if r.Status != http.StatusBadRequest || r.Code() != "GRAPHQL_PARSE_FAILED" || r.Body.Data != nil {
		t.Fatalf("batch: %d %s", r.Status, r.Raw)
	}
	if left, _ := rateLimitHeader(t, r); left != 1000 {
		t.Fatalf("a refused batch was charged: %d", left)
	}
}

func TestIntrospectionFloodIsLimited(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Points: 35}, nil, "")
	q := `{ __schema { types { name fields { name type { name ofType { name } } } } } }`
	for i := 0; i < 3; i++ {
		r := post(t, env, `{"query":`+strconv.Quote(q)+`}`)
		if c, _ := costExt(t, r); r.Status != http.StatusOK || c != 10 {
			t.Fatalf("introspection %d: %d cost %v", i, r.Status, c)
		}
	}
	r := post(t, env, `{"query":`+strconv.Quote(`{ a: __schema { queryType { name } } b: __schema { queryType { name } } }`)+`}`)
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("aliased introspection with 5 points left: %d %s", r.Status, r.Raw)
	}
}

// Introspection is priced by the fields it resolves: aliases that read every
// field of every type 64 times over (5 MB of answer, 0.6 s of CPU) were a
// fixed 10 points, for an anonymous caller too; they are over
// MAX_QUERY_COST now, refused before anything runs, and charged nothing.
func TestWideIntrospectionIsPricedByItsFields(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	var b strings.Builder
	b.WriteString("{ __schema { types { ...A } } }\nfragment A on __Type {")
	for i := 0; i < 64; i++ {
		fmt.Fprintf(&b, " f%d: fields { ...F }", i)
	}
	b.WriteString(" }\nfragment R on __Type { name kind ofType { name kind ofType { name kind ofType { name } } } }\n")
	b.WriteString("fragment F on __Field { name description args { name description type { ...R } defaultValue } type { ...R } isDeprecated deprecationReason }\n")
	r := post(t, env, `{"query":`+strconv.Quote(b.String())+`}`)
	if r.Status != http.StatusOK || r.Code() != "QUERY_TOO_COSTLY" || r.Body.Data != nil || len(r.Raw) > 4096 {
		t.Fatalf("64 aliases of every field: %d, %d bytes: %.300s", r.Status, len(r.Raw), r.Raw)
	}
	if left, _ := rateLimitHeader(t, r); left != 1000 {
		t.Fatalf("a refused introspection was charged: %d left", left)
	}
}

func TestClientIPAndForwardedFor(t *testing.T) {
	t.Parallel()
	t.Run("untrusted peer: X-Forwarded-For is ignored", func(t *testing.T) {
		t.Parallel()
		env, _ := limited(t, ratelimit.Config{Points: 3}, nil, "")
		for i := 0; i < 3; i++ {
			if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", fmt.Sprintf("10.0.0.%d", i)); r.Status != http.StatusOK {
				t.Fatalf("query %d: %d", i, r.Status)
			}
		}
		if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "10.0.0.99"); r.Status != http.StatusTooManyRequests {
			t.Fatalf("a spoofed X-Forwarded-For got a fresh budget: %d", r.Status)
		}
	})
	t.Run("trusted proxy: the right-most untrusted address counts", func(t *testing.T) {
		t.Parallel()
		proxies, err := httpapi.ParseProxies("127.0.0.0/8,::1")
		if err != nil {
			t.Fatal(err)
		}
		env, _ := limited(t, ratelimit.Config{Points: 3}, nil, "", func(o *httpapi.Options) { o.TrustedProxies = proxies })
		for i := 0; i < 3; i++ {
			// The client prepends junk; the proxy appends the real client.
			xff := fmt.Sprintf("6.6.6.%d, 203.0.113.7", i)
			if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", xff); r.Status != http.StatusOK {
				t.Fatalf("query %d: %d", i, r.Status)
			}
		}
		if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "1.1.1.1, 203.0.113.7"); r.Status != http.StatusTooManyRequests {
			t.Fatalf("prepending to X-Forwarded-For got a fresh budget: %d", r.Status)
		}
		if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "203.0.113.8"); r.Status != http.StatusOK {
			t.Fatalf("another client behind the proxy: %d", r.Status)
		}
	})
}

// An IPv6 client picks its addresses within its /64 network at will (privacy
// addresses change every day, and any host can use millions): an anonymous
// caller's budget, login and register limits are its /64's, or one client
// would have as many budgets as it likes. Another /64 has its own.
func TestIPv6ClientsCountByTheirNetwork(t *testing.T) {
	t.Parallel()
	proxies, err := httpapi.ParseProxies("127.0.0.0/8,::1")
	if err != nil {
		t.Fatal(err)
	}
	behindProxy := func(o *httpapi.Options) { o.TrustedProxies = proxies }
	env, _ := limited(t, ratelimit.Config{Points: 3}, nil, "", behindProxy)
	for i := 1; i <= 3; i++ {
		if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", fmt.Sprintf("2001:db8:1:2::%x", i)); r.Status != http.StatusOK {
			t.Fatalf("query %d: %d %s", i, r.Status, r.Raw)
		}
	}
	if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "2001:db8:1:2:aaaa:bbbb:cccc:dddd"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("another address of the same /64 got a fresh budget: %d %s", r.Status, r.Raw)
	}
	if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "2001:db8:1:3::1"); r.Status != http.StatusOK {
		t.Fatalf("another /64: %d %s", r.Status, r.Raw)
	}
	// IPv4 clients, and IPv4 addresses written as IPv6 (::ffff:a.b.c.d), count by address.
	if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "::ffff:198.51.100.1"); r.Status != http.StatusOK {
		t.Fatalf("an IPv4 client: %d %s", r.Status, r.Raw)
	}
	if r := env.Post(t, "", cheap, nil, "X-Forwarded-For", "198.51.100.2"); r.Status != http.StatusOK {
		t.Fatalf("its IPv4 neighbour: %d %s", r.Status, r.Raw)
	}

	env, _ = limited(t, ratelimit.Config{RegisterPerIP: ratelimit.Limit{Points: 1, Window: time.Hour}}, nil, "", behindProxy)
	reg := `mutation($e: String!) { register(input: {email: $e, password: "correct horse", name: "N"}) { token } }`
	if r := env.Post(t, "", reg, map[string]any{"e": "v6a@example.com"}, "X-Forwarded-For", "2001:db8:9:9::1"); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("first register: %d %s", r.Status, r.Raw)
	}
	if r := env.Post(t, "", reg, map[string]any{"e": "v6b@example.com"}, "X-Forwarded-For", "2001:db8:9:9::2"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a register from another address of the same /64: %d %s", r.Status, r.Raw)
	}
}

func TestBudgetComesBackAfterTheWindow(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Points: 2, Window: 2 * time.Second}, nil, "")
	u := env.NewUser(t, "ann")
	env.Post(t, u.Token, cheap, nil)
	env.Post(t, u.Token, cheap, nil)
	r := env.Post(t, u.Token, cheap, nil)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("3rd query: %d Retry-After %q", r.Status, r.Header.Get("Retry-After"))
	}
	eventually(t, 2*time.Minute, "the budget back", func() bool { return env.Post(t, u.Token, cheap, nil).Status == http.StatusOK })
}

func TestLoginLimits(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	login := `mutation($e: String!) { login(email: $e, password: "wrong password") { token } }`
	// 5 per e-mail, whatever the case of the address, whatever the outcome.
	for i := 0; i < 5; i++ {
		e := "Victim@Example.com"
		if i%2 == 1 {
			e = "victim@example.com"
		}
		if r := env.Post(t, "", login, map[string]any{"e": e}); r.Status == http.StatusTooManyRequests {
			t.Fatalf("attempt %d refused", i)
		}
	}
	r := env.Post(t, "", login, map[string]any{"e": " VICTIM@example.com"})
	if r.Status != http.StatusTooManyRequests || r.Code() != "RATE_LIMITED" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("6th attempt on one e-mail: %d %s", r.Status, r.Raw)
	}
	// 10 per IP: 6 counted so far (the refused one too, it was counted on the IP
	// before the e-mail refused it); two aliased logins count twice.
	two := `mutation { a: login(email: "x1@example.com", password: "p") { token } b: login(email: "x2@example.com", password: "p") { token } }`
	for i := 0; i < 2; i++ {
		if r := env.Post(t, "", two, nil); r.Status == http.StatusTooManyRequests {
			t.Fatalf("aliased pair %d refused: %s", i, r.Raw)
		}
	}
	if r := env.Post(t, "", login, map[string]any{"e": "other@example.com"}); r.Status != http.StatusTooManyRequests {
		t.Fatalf("11th attempt from one IP: %d %s", r.Status, r.Raw)
	}
}

func TestRegisterLimitPerIP(t *testing.T) {
	t.Parallel()
	if def, _ := ratelimit.New(ratelimit.Options{Log: quiet}); def.Config().RegisterPerIP != (ratelimit.Limit{Points: 20, Window: time.Hour}) {
		t.Fatalf("default register limit %+v, want 20 per hour", def.Config().RegisterPerIP)
	}
	env, _ := limited(t, ratelimit.Config{RegisterPerIP: ratelimit.Limit{Points: 3, Window: time.Hour}}, nil, "")
	reg := `mutation($e: String!, $p: String!) { register(input: {email: $e, password: $p, name: "N"}) { token } }`
	// Counted whatever the outcome: a refused password counts too.
	if r := env.Post(t, "", reg, map[string]any{"e": "weak@example.com", "p": "password"}); r.Status != http.StatusOK || r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("weak password: %d %s", r.Status, r.Raw)
	}
	// Two aliased registers count twice.
	two := `mutation { a: register(input: {email: "a@example.com", password: "correct horse", name: "A"}) { token }
		b: register(input: {email: "b@example.com", password: "correct horse", name: "B"}) { token } }`
	if r := env.Post(t, "", two, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("two registers: %d %s", r.Status, r.Raw)
	}
	r := env.Post(t, "", reg, map[string]any{"e": "c@example.com", "p": "correct horse"})
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || r.Code() != "RATE_LIMITED" || err != nil || retry < 1 || retry > 20*60 {
		t.Fatalf("4th register from one IP: %d %v %s", r.Status, r.Header, r.Raw)
	}
	var users int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM users`).Scan(&users); err != nil || users != 2 {
		t.Fatalf("%d users, want 2 (%v)", users, err)
	}
	// Signing in is limited apart.
	login := `mutation { login(email: "a@example.com", password: "correct horse") { token } }`
	if r := env.Post(t, "", login, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("login after the register limit: %d %s", r.Status, r.Raw)
	}
}

func TestSearchTasksLimit(t *testing.T) {
	t.Parallel()
	// The contract's 60 per minute refills one search a second, so a test of
	// exact counts uses the same rule with a window long enough not to refill.
	env, _ := limited(t, ratelimit.Config{Points: 100000, Search: ratelimit.Limit{Points: 6, Window: time.Hour}}, nil, "")
	u := env.NewUser(t, "ann")
	q := `{ searchTasks(workspaceId: "1", query: "x", first: 1) { nodes { id } } }`
	for i := 0; i < 6; i++ {
		if r := env.Post(t, u.Token, q, nil); r.Status != http.StatusOK {
			t.Fatalf("search %d: %d %s", i, r.Status, r.Raw)
		}
	}
	r := env.Post(t, u.Token, `{ ...S } fragment S on Query { searchTasks(workspaceId: "1", query: "y", first: 1) { nodes { id } } }`, nil)
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("7th search: %d", r.Status)
	}
	// The cost budget was not charged for the refused search, and other queries pass.
	if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
		t.Fatalf("a non-search query: %d", r.Status)
	}
	// Another user has their own search budget.
	if r := env.Post(t, env.NewUser(t, "bob").Token, q, nil); r.Status != http.StatusOK {
		t.Fatalf("bob's search: %d", r.Status)
	}
}

func TestInstancesShareTheBudgetInRedis(t *testing.T) {
	t.Parallel()
	rdb := ratelimittest.Redis(t)
	prefix := ratelimittest.Prefix()
	a, _ := limited(t, ratelimit.Config{Points: 3}, rdb, prefix)
	lim, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Points: 3}, Redis: rdb, KeyPrefix: prefix, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{DB: a.DB, Log: quiet, Limiter: lim}))
	t.Cleanup(srv.Close)
	b := &apitest.Env{DB: a.DB, Server: srv}
	u := a.NewUser(t, "ann")
	for i, env := range []*apitest.Env{a, b, a} {
		if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
			t.Fatalf("query %d: %d", i, r.Status)
		}
	}
	if r := b.Post(t, u.Token, cheap, nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("4th query on the other instance: %d", r.Status)
	}
}

func TestRedisCutFailsOpen(t *testing.T) {
	t.Parallel()
	redisSrv := ratelimittest.StartRedis(t)
	env, lim := limited(t, ratelimit.Config{Points: 3}, redisSrv.Client(), "")
	u := env.NewUser(t, "ann")
	if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
		t.Fatalf("with Redis: %d", r.Status)
	}
	redisSrv.Stop()
	r := env.Post(t, u.Token, cheap, nil)
	if r.Status != http.StatusOK || r.Header.Get("RateLimit") == "" {
		t.Fatalf("with Redis down: %d %s", r.Status, r.Raw)
	}
	if st := lim.Status(); st.Healthy || st.Backend != "memory-fallback" {
		t.Fatalf("status %+v", st)
	}
	// Still limited in process.
	statuses := []int{}
	for i := 0; i < 4; i++ {
		statuses = append(statuses, env.Post(t, u.Token, cheap, nil).Status)
	}
	if statuses[3] != http.StatusTooManyRequests {
		t.Fatalf("in-process fallback does not limit: %v", statuses)
	}
	redisSrv.Start()
	eventually(t, 2*time.Minute, "back to Redis", lim.Healthy)
	// Redis restarted empty: the budget there is full again.
	if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
		t.Fatalf("after recovery: %d", r.Status)
	}
}

// joinWorkspaces makes n workspaces through SQL, each with user as its OWNER
// and with extra more members (new users), and returns the id of the last.
func joinWorkspaces(t *testing.T, env *apitest.Env, user apitest.User, n, extra int) string {
	t.Helper()
	var last string
	err := env.DB.Pool.QueryRow(t.Context(), `WITH w AS (INSERT INTO workspaces (name) SELECT 'w' || i FROM generate_series(1, $2) i RETURNING id),
		m AS (INSERT INTO members (workspace_id, user_id, role) SELECT id, $1, 'OWNER' FROM w),
		u AS (INSERT INTO users (email, name, password_hash)
			SELECT 'x' || gen_random_uuid() || '@example.com', 'x', 'x' FROM generate_series(1, $3) RETURNING id),
		o AS (INSERT INTO members (workspace_id, user_id, role) SELECT w.id, u.id, 'MEMBER' FROM w, u)
		SELECT max(id::text) FROM w`, user.ID, n, extra).Scan(&last)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// errExt returns the extensions of the response's first error.
func errExt(r *apitest.Response) map[string]any {
	ext, _ := r.Body.Errors[0]["extensions"].(map[string]any)
	return ext
}

// actualCost returns extensions.cost.actualQueryCost (-1 when absent).
func actualCost(t *testing.T, r *apitest.Response) float64 {
	t.Helper()
	c, _ := r.Body.Extensions["cost"].(map[string]any)
	if v, ok := c["actualQueryCost"].(float64); ok {
		return v
	}
	return -1
}

// slowRefill is a budget of points that refills over a day: what it shows
// after a request is what the request took, however slow the machine (a
// budget of 300 refilled 5 points a second by default, 1,000 one point every
// 3.6 s).
func slowRefill(points int) ratelimit.Config {
	return ratelimit.Config{Points: points, Window: 24 * time.Hour}
}

// A list priced by its declared size (me.workspaces: 10, Workspace.members:
// 50) that turns out longer is charged for its items past that size, each the
// cost of its selection, before any of them is resolved: the budget pays for
// what the operation reads, and extensions.cost.actualQueryCost says what it
// took.
func TestListsLongerThanPricedAreCharged(t *testing.T) {
	t.Parallel()
	const (
		perWorkspace = `{ me { workspaces { projects(first: 5) { nodes { id } } } } }` // 1 + 1 + 10 × 6
		perMember    = `{ me { workspaces { members { user { id } } } } }`             // 1 + 1 + 10 × (1 + 50)
	)
	t.Run("charged", func(t *testing.T) {
		t.Parallel()
		env, _ := limited(t, slowRefill(1000), nil, "")
		ann, bob, cat := env.NewUser(t, "ann"), env.NewUser(t, "bob"), env.NewUser(t, "cat")
		joinWorkspaces(t, env, ann, 30, 0) // 20 past the price, 6 points each
		joinWorkspaces(t, env, bob, 1, 59) // 60 members: 10 past the price, 1 point each
		joinWorkspaces(t, env, cat, 2, 0)  // shorter than priced: nothing more, nothing back
		for _, c := range []struct {
			who              apitest.User
			query            string
			items            int
			requested, taken float64
		}{
			{ann, perWorkspace, 30, 62, 62 + 20*6},
			{bob, perMember, 1, 512, 512 + 10},
			{cat, perWorkspace, 2, 62, 62},
		} {
			r := env.Post(t, c.who.Token, c.query, nil)
			var body struct {
				Me struct{ Workspaces []json.RawMessage }
			}
			if err := json.Unmarshal(r.Body.Data, &body); err != nil || r.Code() != "" || len(body.Me.Workspaces) != c.items {
				t.Fatalf("%s: %v %s", c.query, err, r.Raw)
			}
			requested, _ := costExt(t, r)
			left, _ := rateLimitHeader(t, r)
			if requested != c.requested || actualCost(t, r) != c.taken || left != 1000-int(c.taken) {
				t.Errorf("%s by %d workspaces: requested %v, actual %v, %d left; want %v, %v, %v left",
					c.query, c.items, requested, actualCost(t, r), left, c.requested, c.taken, 1000-c.taken)
			}
		}
	})
	t.Run("lists charged at once", func(t *testing.T) {
		t.Parallel()
		env, _ := limited(t, slowRefill(1000), nil, "")
		ann := env.NewUser(t, "ann")
		joinWorkspaces(t, env, ann, 30, 0)
		// Two overruns resolving concurrently, and the rateLimit field beside them.
		r := env.Post(t, ann.Token, `{ a: me { workspaces { projects(first: 5) { nodes { id } } } }
			b: me { workspaces { projects(first: 5) { nodes { id } } } } rateLimit { cost } }`, nil)
		left, _ := rateLimitHeader(t, r)
		if requested, _ := costExt(t, r); r.Code() != "" || requested != 125 || actualCost(t, r) != 125+2*120 || left != 1000-365 {
			t.Fatalf("requested %v, actual %v, %d left: %s", requested, actualCost(t, r), left, r.Raw)
		}
	})
	t.Run("a budget that cannot pay the overrun", func(t *testing.T) {
		t.Parallel()
		env, _ := limited(t, slowRefill(300), nil, "")
		ann := env.NewUser(t, "ann")
		joinWorkspaces(t, env, ann, 30, 0)
		if r := env.Post(t, ann.Token, perWorkspace, nil); r.Code() != "" || actualCost(t, r) != 182 {
			t.Fatalf("first: %s", r.Raw)
		}
		// 118 left: the price (62) is paid, the overrun (120) is not.
		r := env.Post(t, ann.Token, perWorkspace, nil)
		if r.Status != http.StatusOK || r.Code() != "RATE_LIMITED" || string(r.Body.Data) != `{"me":null}` {
			t.Fatalf("second: %d %s", r.Status, r.Raw)
		}
		if retry, _ := errExt(r)["retryAfter"].(float64); retry < 1 {
			t.Fatalf("no retryAfter: %s", r.Raw)
		}
		if left, _ := rateLimitHeader(t, r); left != 118-62 || actualCost(t, r) != 62 {
			t.Fatalf("refused overrun took something: %d left, actual %v: %s", left, actualCost(t, r), r.Raw)
		}
	})
	t.Run("over the maximum cost", func(t *testing.T) {
		t.Parallel()
		env, _ := limited(t, ratelimit.Config{MaxCost: 100}, nil, "")
		ann := env.NewUser(t, "ann")
		joinWorkspaces(t, env, ann, 30, 0)
		r := env.Post(t, ann.Token, perWorkspace, nil)
		if r.Code() != "QUERY_TOO_COSTLY" || string(r.Body.Data) != `{"me":null}` ||
			errExt(r)["cost"] != float64(182) || errExt(r)["maximum"] != float64(100) {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		if left, _ := rateLimitHeader(t, r); left != 1000-62 {
			t.Fatalf("%d left, want %d", left, 1000-62)
		}
	})
}

// Under the default limits (MAX_QUERY_COST and a budget of 1,000), the
// deprecated members list of a workspace of 1,100 members with their user is
// refused QUERY_TOO_COSTLY once read (priced 52, 1,102 with its overrun),
// while membersConnection reads it a page of 100 at a time, each page
// costing its price (302 with pageInfo) and nothing more, whatever the
// workspace's size. (The budget's window is a day, so that what it refills
// between the requests, a point a minute and a half, leaves the counts
// exact; the default refills a point every 60 ms.)
func TestBigWorkspaceIsReadInPages(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Window: 24 * time.Hour}, nil, "")
	ann := env.NewUser(t, "ann")
	ws := joinWorkspaces(t, env, ann, 1, 1099)
	r := env.Post(t, ann.Token, `query($w: ID!) { workspace(id: $w) { members { user { name } } } }`, map[string]any{"w": ws})
	if r.Code() != "QUERY_TOO_COSTLY" || string(r.Body.Data) != `{"workspace":null}` || errExt(r)["cost"] != float64(1102) {
		t.Fatalf("the deprecated list: %s", r.Raw)
	}
	msg, _ := r.Body.Errors[0]["message"].(string)
	if !strings.Contains(msg, "membersConnection") {
		t.Errorf("the refusal does not name membersConnection: %q", msg)
	}
	left := 1000 - 52
	seen := map[string]bool{}
	var after any
	for page := 1; page <= 3; page++ {
		r := env.Post(t, ann.Token, `query($w: ID!, $after: String) { workspace(id: $w) {
			membersConnection(first: 100, after: $after) { nodes { user { id name } } pageInfo { hasNextPage endCursor } } } }`,
			map[string]any{"w": ws, "after": after})
		var d struct {
			Workspace struct {
				MembersConnection struct {
					Nodes    []struct{ User struct{ ID string } }
					PageInfo struct {
						HasNextPage bool
						EndCursor   string
					}
				}
			}
		}
		if err := json.Unmarshal(r.Body.Data, &d); err != nil || r.Code() != "" {
			t.Fatalf("page %d: %v %s", page, err, r.Raw)
		}
		c := d.Workspace.MembersConnection
		for _, n := range c.Nodes {
			seen[n.User.ID] = true
		}
		left -= 302
		requested, _ := costExt(t, r)
		if got, _ := rateLimitHeader(t, r); len(c.Nodes) != 100 || !c.PageInfo.HasNextPage || len(seen) != 100*page ||
			requested != 302 || actualCost(t, r) != 302 || got != left {
			t.Fatalf("page %d: %d members (%d distinct so far), cost %v, actual %v, %d left (want %d)",
				page, len(c.Nodes), len(seen), requested, actualCost(t, r), got, left)
		}
		after = c.PageInfo.EndCursor
	}
}

// A subscription's event whose selection has a list longer than priced
// (here Workspace.members, 62 of 50) is charged that event's overrun each
// time, on top of the event's price; overruns of past events do not add up
// towards MAX_QUERY_COST, which bounds each event.
func TestSubscriptionEventOverrunsAreCharged(t *testing.T) {
	t.Parallel()
	e := overrunEnv(t, 100, 59)
	// Subscribing costs 10 + 54; each event 55 (1 + 1 + 1 + 1 + 51), and 12 for the members past 50.
	s := e.OpenSSE(t, e.member.Token, `subscription($p: ID!) { taskChanges(projectId: $p) {
		task { project { workspace { members { user { id } } } } } } }`, map[string]any{"p": e.project})
	e.waitSubscribed(t, 1)
	const events = 4
	for i := range events {
		e.createTask(t, fmt.Sprint("t", i))
		ev, ok := s.Next()
		var p struct {
			Data struct {
				TaskChanges struct {
					Task struct {
						Project struct{ Workspace struct{ Members []any } }
					}
				}
			}
			Errors []any
		}
		if !ok || ev.Event != "next" || json.Unmarshal([]byte(ev.Data), &p) != nil || len(p.Errors) > 0 ||
			len(p.Data.TaskChanges.Task.Project.Workspace.Members) != 62 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	r := e.Post(t, e.member.Token, cheap, nil)
	if left, _ := rateLimitHeader(t, r); left != 1000-64-events*(55+12)-1 {
		t.Fatalf("%d left, want %d", left, 1000-64-events*(55+12)-1)
	}
}

// overrunEnv is a liveEnv whose limiter has MAX_QUERY_COST maxCost (and a
// window of a day, so that the counts of the budget are exact), with extra
// VIEWERs in its workspace beside its owner, admin and member.
func overrunEnv(t *testing.T, maxCost, extra int) *liveEnv {
	t.Helper()
	lim := dayLimiter(t, maxCost)
	e := newLiveEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	if _, err := e.DB.Pool.Exec(t.Context(), `WITH u AS (INSERT INTO users (email, name, password_hash)
			SELECT 'x' || gen_random_uuid() || '@example.com', 'x', 'x' FROM generate_series(1, $2::int) RETURNING id)
		INSERT INTO members (workspace_id, user_id, role) SELECT $1, id, 'VIEWER' FROM u`, e.ws, extra); err != nil {
		t.Fatal(err)
	}
	return e
}

// overrunEvent is the payload of an event of a taskChanges subscription
// that selects task { project { workspace { members } } }.
type overrunEvent struct {
	Data *struct {
		TaskChanges *struct {
			Cursor, Action, TaskID string
			Task                   *struct {
				Project struct{ Workspace struct{ Members []any } }
			}
		}
	}
	Errors []struct {
		Message    string
		Path       []any
		Extensions map[string]any
	}
}

// An event whose deprecated list (here Workspace.members, 110 of 50) is too
// long for one event to pay (its price, 55, and the 60 members past 50, 115,
// over a MAX_QUERY_COST of 100) is delivered with that list's error,
// QUERY_TOO_COSTLY with its path, cost and maximum, beside the event's other
// fields (the error nulls up to the nullable task), and the overrun is not
// taken; the stream goes on: the next event, its list short again, comes
// whole (docs/api.md, Subscriptions: "QUERY_TOO_COSTLY ends no stream").
// Over SSE and over graphql-ws.
func TestSubscriptionEventOverrunTooCostlyIsTheListsError(t *testing.T) {
	t.Parallel()
	const query = `subscription($p: ID!) { taskChanges(projectId: $p) {
		cursor action taskId task { project { workspace { members { user { id } } } } } } }`
	for _, transport := range []string{"sse", "ws"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			// Subscribing costs 10 + 54; each event 55 (1 + 1 + 1 + 1 + 51).
			e := overrunEnv(t, 100, 107)
			var next func() []byte
			if transport == "sse" {
				s := e.OpenSSE(t, e.member.Token, query, map[string]any{"p": e.project})
				next = func() []byte {
					ev, ok := s.Next()
					if !ok || ev.Event != "next" {
						t.Fatalf("want a next event, got %+v (ok %v)", ev, ok)
					}
					return []byte(ev.Data)
				}
			} else {
				ws := e.dial(t, e.member)
				ws.Subscribe("1", query, map[string]any{"p": e.project})
				next = func() []byte {
					m := ws.Next()
					if m.Type != "next" || m.ID != "1" {
						t.Fatalf("want next of 1, got %s %s %s", m.Type, m.ID, m.Payload)
					}
					return m.Payload
				}
			}
			e.waitSubscribed(t, 1)

			long := e.createTask(t, "long")
			raw := next()
			var p overrunEvent
			if err := json.Unmarshal(raw, &p); err != nil || p.Data == nil || p.Data.TaskChanges == nil {
				t.Fatalf("event with the long list: %v %.800s", err, raw)
			}
			c := p.Data.TaskChanges
			if c.Action != "task.created" || c.TaskID != long || c.Cursor == "" || c.Task != nil || len(p.Errors) != 1 {
				t.Fatalf("event with the long list: want its fields beside one error, task null: %.800s", raw)
			}
			err := p.Errors[0]
			if err.Extensions["code"] != "QUERY_TOO_COSTLY" || err.Extensions["cost"] != float64(115) || err.Extensions["maximum"] != float64(100) ||
				!reflect.DeepEqual(err.Path, []any{"taskChanges", "task", "project", "workspace", "members"}) ||
				!strings.Contains(err.Message, "membersConnection") {
				t.Fatalf("the list's error: want QUERY_TOO_COSTLY at taskChanges.task.project.workspace.members, cost 115, maximum 100, naming membersConnection: %.800s", raw)
			}

			if _, err := e.DB.Pool.Exec(t.Context(), `DELETE FROM members WHERE workspace_id = $1 AND role = 'VIEWER'`, e.ws); err != nil {
				t.Fatal(err)
			}
			short := e.createTask(t, "short")
			raw = next()
			p = overrunEvent{}
			if err := json.Unmarshal(raw, &p); err != nil || p.Data == nil || p.Data.TaskChanges == nil || len(p.Errors) > 0 ||
				p.Data.TaskChanges.TaskID != short || p.Data.TaskChanges.Task == nil ||
				len(p.Data.TaskChanges.Task.Project.Workspace.Members) != 3 {
				t.Fatalf("the stream did not go on with the next event whole: %v %.800s", err, raw)
			}

			// Charged: subscribing, both events' prices, nothing for the
			// refused overrun, and the 1 of this query.
			r := e.Post(t, e.member.Token, cheap, nil)
			if left, _ := rateLimitHeader(t, r); left != 1000-64-2*55-1 {
				t.Fatalf("%d left, want %d", left, 1000-64-2*55-1)
			}
		})
	}
}

// The overruns of the lists of one event add up towards MAX_QUERY_COST with
// its price, as an operation's do: two aliases of Workspace.members (110 of
// 50: 60 past the price each) in an event priced 106 under a maximum of 200
// are one charged (166) and one refused (226); the next event is the same.
func TestSubscriptionEventOverrunsAddUpInTheEvent(t *testing.T) {
	t.Parallel()
	e := overrunEnv(t, 200, 107)
	// Subscribing costs 10 + 105; each event 106 (1 + 1 + 1 + 1 + 2 × 51).
	s := e.OpenSSE(t, e.member.Token, `subscription($p: ID!) { taskChanges(projectId: $p) {
		taskId task { project { workspace { a: members { user { id } } b: members { user { id } } } } } } }`,
		map[string]any{"p": e.project})
	e.waitSubscribed(t, 1)
	const events = 2
	for i := range events {
		id := e.createTask(t, fmt.Sprint("t", i))
		ev, ok := s.Next()
		var p overrunEvent
		if !ok || ev.Event != "next" || json.Unmarshal([]byte(ev.Data), &p) != nil || p.Data == nil || p.Data.TaskChanges == nil ||
			p.Data.TaskChanges.TaskID != id || len(p.Errors) != 1 || p.Errors[0].Extensions["code"] != "QUERY_TOO_COSTLY" ||
			p.Errors[0].Extensions["cost"] != float64(226) || p.Errors[0].Extensions["maximum"] != float64(200) {
			t.Fatalf("event %d: want the event with one list's QUERY_TOO_COSTLY, cost 226: %v %.800s", i, ok, ev.Data)
		}
	}
	r := e.Post(t, e.member.Token, cheap, nil)
	if left, _ := rateLimitHeader(t, r); left != 1000-115-events*(106+60)-1 {
		t.Fatalf("%d left, want %d", left, 1000-115-events*(106+60)-1)
	}
}

// verifyAuditLog walks and hashes every event of the workspace's chain
// (about 12 µs an event: 20,000 took 0.25 s) and was priced 1 point whatever
// the chain's length, each alias too: 8 aliases took 1.6 s for 8 points. The
// walk is now charged a point for every 100 events before it starts, and a
// walk the operation cannot pay for does not run.
func TestVerifyAuditLogIsChargedItsWalk(t *testing.T) {
	t.Parallel()
	_, lim := limited(t, ratelimit.Config{}, nil, "")
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	if _, err := e.DB.Pool.Exec(context.Background(), `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id,
		action, entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid, 'task.created', 'task', 't' || i,
			'2026-05-01T00:00:00Z'::timestamptz + i * interval '1 second', '{}'::jsonb
		FROM generate_series(1, 2000) i`, e.ws, e.owner.ID); err != nil {
		t.Fatal(err)
	}
	e.Seal(t)
	verify := func(aliases int) *apitest.Response {
		var b strings.Builder
		b.WriteString("query($ws: ID!) {")
		for i := range aliases {
			fmt.Fprintf(&b, " a%d: verifyAuditLog(workspaceId: $ws) { valid checkedEvents }", i)
		}
		b.WriteString(" }")
		return e.Post(t, e.owner.Token, b.String(), map[string]any{"ws": e.ws})
	}
	r := verify(1)
	if r.Code() != "" || !strings.Contains(string(r.Body.Data), `"checkedEvents":2000`) {
		t.Fatalf("verify: %s", r.Raw)
	}
	// 1 for the field, 20 for the walk of 2,000 events.
	if got := actualCost(t, r); got != 21 {
		t.Fatalf("a walk of 2,000 events took %v points, want 21: %s", got, r.Raw)
	}
	if left, _ := rateLimitHeader(t, r); left != 1000-21 {
		t.Fatalf("left %d after a walk of 2,000 events", left)
	}
	// 64 walks in one operation are more than MAX_QUERY_COST: those past it
	// are refused before they read anything.
	r = verify(64)
	if !strings.Contains(string(r.Raw), "QUERY_TOO_COSTLY") || !strings.Contains(string(r.Raw), "walks the 2000 events") {
		t.Fatalf("64 walks: %.500s", r.Raw)
	}
	if got := actualCost(t, r); got > 1000 {
		t.Fatalf("64 walks took %v points, more than MAX_QUERY_COST", got)
	}
}
