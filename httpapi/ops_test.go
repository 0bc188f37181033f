package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/reqinfo"
	"taskflow/store"
)

// offlineHandler returns the handler on a store whose Postgres never answers
// (a pool to a closed port), for the parts of the API that do not need one.
func offlineHandler(t *testing.T, o httpapi.Options) http.Handler {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://taskflow@127.0.0.1:1/taskflow?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	o.DB = store.New(pool, nil)
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return httpapi.NewHandler(o)
}

// serve runs req through h and returns the recorded response.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// healthBody is /healthz's body: Postgres, and Redis as a dependency or as
// the rate limiter's view of it.
type healthBody struct {
	Status   string `json:"status"`
	Postgres struct {
		OK bool `json:"ok"`
	} `json:"postgres"`
	Redis struct {
		OK    bool   `json:"ok"`
		Mode  string `json:"mode"`
		Error string `json:"error"`
	} `json:"redis"`
}

// getHealth returns /healthz's status and body, and checks its Content-Type.
func getHealth(t *testing.T, h http.Handler) (int, healthBody) {
	t.Helper()
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var body healthBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("healthz body %q: %v", rec.Body, err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	return rec.Code, body
}

func TestHealthzOKWhenPostgresAnswers(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Dependencies = []httpapi.Dependency{{Name: "redis", Mode: "in-process (single instance only)"}}
	})
	code, body := getHealth(t, env.Handler)
	if code != http.StatusOK || body.Status != "ok" || !body.Postgres.OK {
		t.Fatalf("healthz = %d %+v, want 200 ok with postgres ok", code, body)
	}
	if !body.Redis.OK || body.Redis.Mode != "in-process (single instance only)" {
		t.Fatalf("redis = %+v, want ok in-process", body.Redis)
	}
}

func TestHealthzDegradedWhenAnotherDependencyFails(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Dependencies = []httpapi.Dependency{{Name: "redis", Mode: "shared", Ping: func(context.Context) error {
			return errors.New("connection refused")
		}}}
	})
	code, body := getHealth(t, env.Handler)
	if code != http.StatusOK || body.Status != "degraded" || !body.Postgres.OK {
		t.Fatalf("healthz = %d %+v, want 200 degraded", code, body)
	}
	if body.Redis.OK || body.Redis.Mode != "shared" {
		t.Fatalf("redis = %+v, want shared, not ok", body.Redis)
	}
}

// A bearer token that cannot be looked up (Postgres does not answer) is not a
// sign-out: every endpoint that takes a token answers 503 UNAVAILABLE with
// Retry-After, never 401 (a client would drop its session).
func TestTokenLookupFailureIsNotASignOut(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{})
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(`{"query":"{ me { id } }"}`)),
		httptest.NewRequest(http.MethodGet, "/audit/export?workspaceId=00000000-0000-0000-0000-000000000000", nil),
	} {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer some-token")
		rec := serve(h, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" ||
			!strings.Contains(rec.Body.String(), `"code":"UNAVAILABLE","retryAfter":1`) {
			t.Errorf("%s %s with Postgres down: %d %q %s", req.Method, req.URL.Path, rec.Code,
				rec.Header().Get("Retry-After"), rec.Body)
		}
	}
}

func TestHealthz503WhenPostgresDoesNotAnswer(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{})
	code, body := getHealth(t, h)
	if code != http.StatusServiceUnavailable || body.Status != "unavailable" || body.Postgres.OK {
		t.Fatalf("healthz = %d %+v, want 503 unavailable", code, body)
	}
}

// metricLine returns the exposition line of a sample, or "".
func metricLine(t *testing.T, h http.Handler, prefix string) string {
	t.Helper()
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d", rec.Code)
	}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix+" ") {
			return sc.Text()
		}
	}
	return ""
}

func TestMetricsCountOperationsByNameAndOutcome(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for range 2 {
		if r := env.Post(t, "", `query Ping { __typename }`, nil); r.Status != http.StatusOK {
			t.Fatalf("Ping = %d %s", r.Status, r.Raw)
		}
	}
	if r := env.Post(t, "", `query Broken { noSuchField }`, nil); r.Code() != "GRAPHQL_VALIDATION_FAILED" {
		t.Fatalf("Broken = %s", r.Raw)
	}
	h := env.Handler
	if got := metricLine(t, h, `taskflow_graphql_operations_total{operation="Ping",outcome="ok",type="query"}`); !strings.HasSuffix(got, " 2") {
		t.Errorf("Ping counter line = %q, want count 2", got)
	}
	if got := metricLine(t, h, `taskflow_graphql_operations_total{operation="Broken",outcome="GRAPHQL_VALIDATION_FAILED",type="query"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("Broken counter line = %q, want count 1", got)
	}
	if got := metricLine(t, h, `taskflow_graphql_operation_duration_seconds_count{operation="Ping",outcome="ok",type="query"}`); !strings.HasSuffix(got, " 2") {
		t.Errorf("Ping histogram count = %q, want 2", got)
	}
	// With application/json a validation failure is a 200 too (GraphQL over
	// HTTP); the operations counter's outcome is what tells them apart.
	if got := metricLine(t, h, `taskflow_http_requests_total{code="200",method="POST",route="/query"}`); !strings.HasSuffix(got, " 3") {
		t.Errorf("HTTP counter line = %q, want 3 POSTs answered 200", got)
	}
}

func TestMetricsShareTheGivenRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "taskflow_other_package_total", Help: "x"})
	reg.MustRegister(other)
	other.Add(3)
	// Two handlers on one registry must not clash; both count into it.
	h1 := offlineHandler(t, httpapi.Options{Registry: reg})
	h2 := offlineHandler(t, httpapi.Options{Registry: reg})
	for _, h := range []http.Handler{h1, h2} {
		req := httptest.NewRequest(http.MethodGet, "/query?query=query+Typename{__typename}", nil)
		if rec := serve(h, req); rec.Code != http.StatusOK {
			t.Fatalf("GET /query = %d %s", rec.Code, rec.Body)
		}
	}
	if got := metricLine(t, h1, `taskflow_graphql_operations_total{operation="Typename",outcome="ok",type="query"}`); !strings.HasSuffix(got, " 2") {
		t.Errorf("counter = %q, want 2 across both handlers", got)
	}
	if got := metricLine(t, h2, `taskflow_other_package_total`); got != "taskflow_other_package_total 3" {
		t.Errorf("other package's metric = %q", got)
	}
}

// preflight sends a CORS preflight for POST /query from origin.
func preflight(h http.Handler, origin, headers string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodOptions, "/query", nil)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	if headers != "" {
		req.Header.Set("Access-Control-Request-Headers", headers)
	}
	return serve(h, req)
}

func TestCORSPreflightAllowedOrigin(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{CORS: httpapi.CORS{AllowedOrigins: []string{"https://app.example.com"}}})
	rec := preflight(h, "https://app.example.com", "authorization,content-type,idempotency-key,x-request-id")
	if rec.Code != http.StatusNoContent {
		t.Fatalf("preflight = %d, want 204", rec.Code)
	}
	want := map[string]string{
		"Access-Control-Allow-Origin":  "https://app.example.com",
		"Access-Control-Allow-Methods": "GET, POST, OPTIONS",
		"Access-Control-Allow-Headers": "Authorization, Content-Type, Idempotency-Key, X-Request-ID, GraphQL-Preflight, Apollo-Require-Preflight, X-Apollo-Operation-Name, Range, If-Range, If-None-Match, traceparent, tracestate, baggage",
	}
	for k, v := range want {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if got := rec.Header().Get("Access-Control-Allow-Credentials"); got != "" {
		t.Errorf("credentials allowed by default: %q", got)
	}

	// The actual request: origin allowed, headers exposed, credentials off.
	req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(`{"query":"{ __typename }"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://app.example.com")
	rec = serve(h, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST = %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "https://app.example.com" {
		t.Errorf("Allow-Origin = %q", got)
	}
	expose := rec.Header().Get("Access-Control-Expose-Headers")
	for _, name := range []string{"Retry-After", "RateLimit", "RateLimit-Policy", "Idempotent-Replayed", "X-Request-ID"} {
		if !strings.Contains(expose, name) {
			t.Errorf("Expose-Headers %q lacks %s", expose, name)
		}
	}
	if !strings.Contains(strings.Join(rec.Header().Values("Vary"), ","), "Origin") {
		t.Errorf("Vary = %q, want Origin", rec.Header().Values("Vary"))
	}
}

// TestCORSPreflightAllowsTheDocumentedRequestHeaders asks, one preflight per
// header, for each request header docs/api.md ("Headers") lets a browser at
// an allowed origin send: a refused preflight fails the whole request.
func TestCORSPreflightAllowsTheDocumentedRequestHeaders(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{CORS: httpapi.CORS{AllowedOrigins: []string{"https://app.example.com"}}})
	for _, name := range []string{"Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID", "Accept",
		"GraphQL-Preflight", "Apollo-Require-Preflight", "X-Apollo-Operation-Name", "Range", "If-Range",
		"If-None-Match", "traceparent", "tracestate", "baggage"} {
		rec := preflight(h, "https://app.example.com", strings.ToLower(name))
		if rec.Code != http.StatusNoContent {
			t.Errorf("preflight for %s = %d, want 204", name, rec.Code)
			continue
		}
		if allowed := strings.ToLower(rec.Header().Get("Access-Control-Allow-Headers")); name != "Accept" &&
			!slices.Contains(strings.Split(strings.ReplaceAll(allowed, " ", ""), ","), strings.ToLower(name)) {
			t.Errorf("Access-Control-Allow-Headers %q lacks %s", allowed, name)
		}
	}
}

func TestCORSDeniedOrigin(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{CORS: httpapi.CORS{AllowedOrigins: []string{"https://app.example.com"}}})
	for _, origin := range []string{"https://evil.example.com", "http://app.example.com", "https://app.example.com:8443"} {
		rec := preflight(h, origin, "content-type")
		if rec.Code != http.StatusForbidden || rec.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight from %s = %d %q, want 403 without Allow-Origin", origin, rec.Code,
				rec.Header().Get("Access-Control-Allow-Origin"))
		}
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(`{"query":"{ __typename }"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		rec = serve(h, req)
		if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("POST from %s: Allow-Origin = %q", origin, got)
		}
	}
	// An allowed origin asking for a method or header outside the policy.
	req := httptest.NewRequest(http.MethodOptions, "/query", nil)
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Access-Control-Request-Method", "DELETE")
	if rec := serve(h, req); rec.Code != http.StatusForbidden {
		t.Errorf("DELETE preflight = %d, want 403", rec.Code)
	}
	if rec := preflight(h, "https://app.example.com", "content-type,x-secret"); rec.Code != http.StatusForbidden {
		t.Errorf("preflight for x-secret = %d, want 403", rec.Code)
	}
	// No origins configured (the default): nobody is allowed.
	h = offlineHandler(t, httpapi.Options{})
	if rec := preflight(h, "https://app.example.com", ""); rec.Code != http.StatusForbidden {
		t.Errorf("default policy preflight = %d, want 403", rec.Code)
	}
}

func TestCORSCredentialsWhenEnabled(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{CORS: httpapi.CORS{AllowedOrigins: []string{"*"}, AllowCredentials: true}})
	rec := preflight(h, "https://any.example.org", "authorization")
	if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Origin") != "https://any.example.org" ||
		rec.Header().Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("preflight = %d %v", rec.Code, rec.Header())
	}
}

func TestParseOrigins(t *testing.T) {
	t.Parallel()
	got, err := httpapi.ParseOrigins(" https://App.Example.com , http://localhost:3000/ ,*")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://app.example.com", "http://localhost:3000", "*"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ParseOrigins = %q, want %q", got, want)
	}
	for _, bad := range []string{"app.example.com", "ftp://x.example.com", "https://x.example.com/path", "https://"} {
		if _, err := httpapi.ParseOrigins(bad); err == nil || !strings.Contains(err.Error(), "CORS_ALLOWED_ORIGINS") {
			t.Errorf("ParseOrigins(%q) err = %v, want a CORS_ALLOWED_ORIGINS error", bad, err)
		}
	}
}

// syncBuffer is a log sink safe for the handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the logged JSON records.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRequestIDEchoedAndGenerated(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	r := env.Post(t, "", `query Echo { __typename }`, nil, "X-Request-ID", "client-chosen-id-42")
	if got := r.Header.Get("X-Request-ID"); got != "client-chosen-id-42" {
		t.Fatalf("echoed X-Request-ID = %q", got)
	}
	// No id, or one that is not sane (spaces, too long): the server makes one.
	seen := map[string]bool{}
	for _, sent := range []string{"", "has spaces in it", strings.Repeat("x", 129)} {
		var hdr []string
		if sent != "" {
			hdr = []string{"X-Request-ID", sent}
		}
		r := env.Post(t, "", `query Echo { __typename }`, nil, hdr...)
		got := r.Header.Get("X-Request-ID")
		if got == "" || got == sent || seen[got] {
			t.Fatalf("sent %q: X-Request-ID = %q, want a fresh generated id", sent, got)
		}
		seen[got] = true
	}
	// Non-GraphQL routes carry one too.
	res, err := env.Server.Client().Get(env.Server.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.Header.Get("X-Request-ID") == "" {
		t.Fatal("no X-Request-ID on /healthz")
	}

	// The access log line of the first request names its id and operation.
	var found bool
	for _, l := range logs.lines(t) {
		if l["msg"] == "request" && l["request_id"] == "client-chosen-id-42" {
			found = true
			if l["operation"] != "Echo" || l["outcome"] != "ok" || l["status"] != float64(200) ||
				l["method"] != "POST" || l["path"] != "/query" {
				t.Errorf("access log line = %v", l)
			}
		}
	}
	if !found {
		t.Fatalf("no access log line with the request id in %v", logs.lines(t))
	}
}

func TestLogHandlerAddsRequestID(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	log := slog.New(httpapi.LogHandler(slog.NewJSONHandler(&logs, nil))).With("component", "test")
	ctx := reqinfo.With(context.Background(), reqinfo.Info{RequestID: "rid-1"})
	log.InfoContext(ctx, "with context")
	log.InfoContext(ctx, "explicit", "request_id", "rid-1")
	log.Info("without context")
	lines := logs.lines(t)
	if len(lines) != 3 {
		t.Fatalf("lines = %v", lines)
	}
	if lines[0]["request_id"] != "rid-1" || lines[0]["component"] != "test" {
		t.Errorf("with context: %v", lines[0])
	}
	if strings.Count(logs.b.String(), `"request_id"`) != 2 {
		t.Errorf("request_id duplicated or missing: %s", logs.b.String())
	}
	if _, ok := lines[2]["request_id"]; ok {
		t.Errorf("without context: %v", lines[2])
	}
}

func TestPlaygroundServesGraphiQL(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{})
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	page := rec.Body.String()
	for _, want := range []string{
		`id="graphiql"`,
		`src="/playground/assets/playground.js?v=`,
		`Authorization`,
		"auditEvents(workspaceId: $workspaceId, filter: $filter",
		"pageInfo { hasNextPage endCursor }",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("playground lacks %q", want)
		}
	}
	if strings.Contains(page, "https://") || strings.Contains(page, "http://") {
		t.Errorf("playground page references another origin:\n%s", page)
	}
	// Only the root is the playground.
	if rec := serve(h, httptest.NewRequest(http.MethodGet, "/nothing-here", nil)); rec.Code != http.StatusNotFound {
		t.Errorf("GET /nothing-here = %d, want 404", rec.Code)
	}
}

// With MetricsToken, /metrics answers only a request with that bearer token.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef0123"
	h := offlineHandler(t, httpapi.Options{MetricsToken: token})
	for _, c := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong-token-0123456789", http.StatusUnauthorized},
		{"Bearer " + token + "x", http.StatusUnauthorized},
		{token, http.StatusUnauthorized},
		{"Bearer " + token, http.StatusOK},
	} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := serve(h, req)
		if rec.Code != c.want {
			t.Errorf("Authorization %q: %d, want %d", c.auth, rec.Code, c.want)
		}
		if c.want == http.StatusUnauthorized && (rec.Header().Get("WWW-Authenticate") == "" || strings.Contains(rec.Body.String(), "go_goroutines")) {
			t.Errorf("Authorization %q: refusal %v %q", c.auth, rec.Header(), rec.Body)
		}
		if c.want == http.StatusOK && !strings.Contains(rec.Body.String(), "taskflow_") {
			t.Errorf("metrics body: %.200s", rec.Body)
		}
	}
}
