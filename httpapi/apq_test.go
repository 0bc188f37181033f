package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"taskflow/apq"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

func sha(q string) string {
	b := sha256.Sum256([]byte(q))
	return hex.EncodeToString(b[:])
}

// pqExt is extensions.persistedQuery for hash.
func pqExt(hash string) map[string]any {
	return map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hash}}
}

// postPQ POSTs a persisted-query request: the query text only when query is
// not empty, as Apollo Client does.
func postPQ(t *testing.T, env *apitest.Env, token, query, hash string, vars map[string]any, headers ...string) *apitest.Response {
	t.Helper()
	body := map[string]any{"extensions": pqExt(hash)}
	if query != "" {
		body["query"] = query
	}
	if vars != nil {
		body["variables"] = vars
	}
	b, _ := json.Marshal(body)
	if token != "" {
		headers = append(headers, "Authorization", "Bearer "+token)
	}
	return post(t, env, string(b), headers...)
}

// getPQ GETs a persisted query by hash only (Apollo's useGETForHashedQueries).
func getPQ(t *testing.T, env *apitest.Env, token, hash string, vars map[string]any) *apitest.Response {
	t.Helper()
	ext, _ := json.Marshal(pqExt(hash))
	return getWith(t, env, url.Values{"extensions": {string(ext)}}, vars, token)
}

// wantNotFound checks the protocol's first answer.
func wantNotFound(t *testing.T, r *apitest.Response, status int) {
	t.Helper()
	if r.Status != status || r.Code() != apq.CodeNotFound || len(r.Body.Errors) != 1 ||
		r.Body.Errors[0]["message"] != "PersistedQueryNotFound" || r.Body.Data != nil {
		t.Fatalf("want %d PERSISTED_QUERY_NOT_FOUND, got %d %s", status, r.Status, r.Raw)
	}
}

func TestPersistedQueryProtocol(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.NewUser(t, "ann")
	q := `query Me { me { id email } }`
	h := sha(q)

	// Hash only: not found, 200 for JSON, 404 for a GraphQL response.
	wantNotFound(t, postPQ(t, env, u.Token, "", h, nil), http.StatusOK)
	wantNotFound(t, postPQ(t, env, u.Token, "", h, nil, "Accept", "application/graphql-response+json"), http.StatusNotFound)
	wantNotFound(t, getPQ(t, env, u.Token, h, nil), http.StatusOK)

	// The retry with the text runs and stores it.
	full := postPQ(t, env, u.Token, q, h, nil)
	if full.Status != http.StatusOK || len(full.Body.Errors) != 0 || len(full.Body.Data) == 0 {
		t.Fatalf("query+hash: %d %s", full.Status, full.Raw)
	}
	for name, r := range map[string]*apitest.Response{
		"POST": postPQ(t, env, u.Token, "", h, nil),
		"GET":  getPQ(t, env, u.Token, h, nil),
	} {
		if r.Status != http.StatusOK || len(r.Body.Errors) != 0 || string(r.Body.Data) != string(full.Body.Data) {
			t.Fatalf("%s hash only after registration: %d %s, want %s", name, r.Status, r.Raw, full.Body.Data)
		}
	}
	// Another client's token gets its own answer from the same stored text.
	v := env.NewUser(t, "bob")
	if r := postPQ(t, env, v.Token, "", h, nil); r.Status != http.StatusOK || string(r.Body.Data) == string(full.Body.Data) {
		t.Fatalf("bob's me: %d %s", r.Status, r.Raw)
	}
	// A hash that does not match its text is refused.
	if r := postPQ(t, env, u.Token, q, sha("other"), nil); r.Status != http.StatusBadRequest {
		t.Fatalf("mismatched hash: %d %s", r.Status, r.Raw)
	}
	// Each outcome is counted.
	for outcome, want := range map[string]string{"miss": "3", "registered": "1", "hit": "3", "refused": "1"} {
		line := `taskflow_apq_requests_total{outcome="` + outcome + `"}`
		if got := metricValue(t, env, line); got != want {
			t.Errorf("%s = %q, want %s", line, got, want)
		}
	}
}

// metricValue returns the value of the exposition line that starts with
// series in env's /metrics, or "".
func metricValue(t *testing.T, env *apitest.Env, series string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, env.Server.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := env.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

func TestPersistedQueryRefusals(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.NewUser(t, "ann")
	q := `{ me { id } }`
	other := sha(`{ me { email } }`)

	// A hash that is not the text's: 400, nothing stored under either hash.
	for _, accept := range []string{"application/json", "application/graphql-response+json"} {
		r := postPQ(t, env, u.Token, q, other, nil, "Accept", accept)
		if r.Status != http.StatusBadRequest || r.Body.Data != nil || len(r.Body.Errors) != 1 ||
			r.Body.Errors[0]["message"] != "provided sha does not match query" {
			t.Fatalf("mismatch (%s): %d %s", accept, r.Status, r.Raw)
		}
	}
	wantNotFound(t, postPQ(t, env, u.Token, "", other, nil), http.StatusOK)
	wantNotFound(t, postPQ(t, env, u.Token, "", sha(q), nil), http.StatusOK)

	// Not a SHA-256 at all, with or without a text.
	if r := postPQ(t, env, u.Token, q, "abc", nil); r.Status != http.StatusBadRequest {
		t.Fatalf("malformed hash with text: %d %s", r.Status, r.Raw)
	}
	wantNotFound(t, postPQ(t, env, u.Token, "", "../../etc", nil), http.StatusOK)

	// Another protocol version.
	b, _ := json.Marshal(map[string]any{"query": q, "extensions": map[string]any{
		"persistedQuery": map[string]any{"version": 2, "sha256Hash": sha(q)}}})
	if r := post(t, env, string(b)); r.Status != http.StatusBadRequest || r.Body.Data != nil {
		t.Fatalf("version 2: %d %s", r.Status, r.Raw)
	}

	// A document the server refuses is not stored either.
	bad := `{ nope }`
	if r := postPQ(t, env, u.Token, bad, sha(bad), nil); r.Status != http.StatusOK || r.Code() != "GRAPHQL_VALIDATION_FAILED" {
		t.Fatalf("invalid document: %d %s", r.Status, r.Raw)
	}
	wantNotFound(t, postPQ(t, env, u.Token, "", sha(bad), nil), http.StatusOK)

	// Neither query nor persisted query: still a parse failure.
	if r := post(t, env, `{"extensions":{}}`); r.Status != http.StatusBadRequest || r.Code() != "GRAPHQL_PARSE_FAILED" {
		t.Fatalf("no query: %d %s", r.Status, r.Raw)
	}
}

func TestPersistedQueriesCostTheSameAsTheirText(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Window: 1000 * time.Hour}, nil, "")
	u := env.NewUser(t, "ann")
	q := `query($n: Int) { searchTasks(workspaceId: "1", query: "x", first: $n) { nodes { id } } }`
	vars := map[string]any{"n": 7}
	h := sha(q)

	// Not found is not charged.
	nf := postPQ(t, env, u.Token, "", h, vars)
	wantNotFound(t, nf, http.StatusOK)
	if left, _ := rateLimitHeader(t, nf); left != 1000 {
		t.Fatalf("PERSISTED_QUERY_NOT_FOUND was charged: %d left", left)
	}

	text := env.Post(t, u.Token, q, vars)
	reg := postPQ(t, env, u.Token, q, h, vars)
	byPOST := postPQ(t, env, u.Token, "", h, vars)
	byGET := getPQ(t, env, u.Token, h, vars)
	want := []int{992, 984, 976, 968}
	for i, r := range []*apitest.Response{text, reg, byPOST, byGET} {
		c, _ := costExt(t, r)
		left, _ := rateLimitHeader(t, r)
		if r.Status != http.StatusOK || c != 8 || left != want[i] {
			t.Fatalf("request %d: %d cost %v left %d, want cost 8 left %d: %s", i, r.Status, c, left, want[i], r.Raw)
		}
	}

	// A mutation registered by POST (anonymously: it does not sign ann out)
	// and sent by hash over GET: 405, uncharged.
	m := `mutation { logout }`
	if r := postPQ(t, env, "", m, sha(m), nil); r.Status != http.StatusOK {
		t.Fatalf("register mutation: %d %s", r.Status, r.Raw)
	}
	before, _ := rateLimitHeader(t, env.Post(t, u.Token, `{ __typename }`, nil))
	r := getPQ(t, env, u.Token, sha(m), nil)
	if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" || r.Body.Data != nil {
		t.Fatalf("GET mutation by hash: %d %v %s", r.Status, r.Header, r.Raw)
	}
	if left, _ := rateLimitHeader(t, r); left != before {
		t.Fatalf("GET mutation by hash was charged: %d left, %d before", left, before)
	}

	// A mutation's text sent by GET is refused and not stored.
	m2 := `mutation { logout }  `
	ext, _ := json.Marshal(pqExt(sha(m2)))
	req, err := http.NewRequest(http.MethodGet, env.Server.URL+"/query?"+url.Values{"query": {m2}, "extensions": {string(ext)}}.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := env.Do(t, req); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("GET mutation text with hash: %d %s", r.Status, r.Raw)
	}
	wantNotFound(t, postPQ(t, env, "", "", sha(m2), nil), http.StatusOK)
}

func TestRateLimitedPersistedQueryIsNotStored(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{Points: 1, Window: 1000 * time.Hour}, nil, "")
	u := env.NewUser(t, "ann")
	if r := env.Post(t, u.Token, cheap, nil); r.Status != http.StatusOK {
		t.Fatalf("first: %d %s", r.Status, r.Raw)
	}
	q := `{ me { id } }`
	if r := postPQ(t, env, u.Token, q, sha(q), nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("over budget: %d %s", r.Status, r.Raw)
	}
	wantNotFound(t, postPQ(t, env, u.Token, "", sha(q), nil), http.StatusOK)
}

func TestPersistedQueriesInRedisAreShared(t *testing.T) {
	t.Parallel()
	rdb := ratelimittest.Redis(t)
	prefix := ratelimittest.Prefix()
	a := apitest.New(t, func(o *httpapi.Options) {
		o.PersistedQueries = apq.NewRedisCache(rdb, prefix, time.Hour, quiet)
	})
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{DB: a.DB, Log: quiet, Limiter: apitest.Unlimited(),
		PersistedQueries: apq.NewRedisCache(rdb, prefix, time.Hour, quiet)}))
	t.Cleanup(srv.Close)
	b := &apitest.Env{DB: a.DB, Server: srv}
	u := a.NewUser(t, "ann")
	q := `{ me { id } }`
	h := sha(q)

	wantNotFound(t, postPQ(t, b, u.Token, "", h, nil), http.StatusOK)
	if r := postPQ(t, a, u.Token, q, h, nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
		t.Fatalf("register on a: %d %s", r.Status, r.Raw)
	}
	r := getPQ(t, b, u.Token, h, nil)
	if r.Status != http.StatusOK || len(r.Body.Errors) != 0 || len(r.Body.Data) == 0 {
		t.Fatalf("hash only on b: %d %s", r.Status, r.Raw)
	}
	// Stored under the prefix with a TTL.
	ttl, err := rdb.TTL(t.Context(), prefix+"apq:"+h).Result()
	if err != nil || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("TTL of the stored query: %v %v", ttl, err)
	}
	if got, _ := rdb.Get(t.Context(), prefix+"apq:"+h).Result(); got != q {
		t.Fatalf("stored %q", got)
	}
	// A mismatching hash stores nothing in Redis.
	if r := postPQ(t, a, u.Token, q, sha("x"), nil); r.Status != http.StatusBadRequest {
		t.Fatalf("mismatch: %d", r.Status)
	}
	if n, _ := rdb.Exists(t.Context(), prefix+"apq:"+sha("x")).Result(); n != 0 {
		t.Fatal("a mismatching hash was stored")
	}
}

func TestPersistedQueriesSurviveARedisOutage(t *testing.T) {
	t.Parallel()
	redisSrv := ratelimittest.StartRedis(t)
	env := apitest.New(t, func(o *httpapi.Options) {
		o.PersistedQueries = apq.NewRedisCache(redisSrv.Client(), ratelimittest.Prefix(), time.Hour, quiet)
	})
	u := env.NewUser(t, "ann")
	q := `{ me { id } }`
	redisSrv.Stop()
	// Every lookup misses; the text still runs (and cannot be stored).
	wantNotFound(t, postPQ(t, env, u.Token, "", sha(q), nil), http.StatusOK)
	if r := postPQ(t, env, u.Token, q, sha(q), nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
		t.Fatalf("text with Redis down: %d %s", r.Status, r.Raw)
	}
}

// TestPersistedQueryTextsStoredAreBoundedPerClient registers, from one
// client, 17 texts of 64 KiB that cost nothing ({ __typename } after a
// comment): the first 16 (1 MiB) are stored, the 17th is run but not stored,
// so no client can fill the shared cache (Redis, where texts stay 24 h) at
// the rate it can send requests.
func TestPersistedQueryTextsStoredAreBoundedPerClient(t *testing.T) {
	t.Parallel()
	env, _ := limited(t, ratelimit.Config{}, nil, "")
	var hashes []string
	for i := range 17 {
		text := fmt.Sprintf("# %02d ", i) + strings.Repeat("x", apq.MaxQueryBytes-100) + "\n{ __typename }"
		hashes = append(hashes, sha(text))
		if r := postPQ(t, env, "", text, sha(text), nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
			t.Fatalf("text %d: %d %.300s", i, r.Status, r.Raw)
		}
	}
	for i, h := range hashes[:16] {
		if r := postPQ(t, env, "", "", h, nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
			t.Fatalf("text %d by hash: %d %.300s", i, r.Status, r.Raw)
		}
	}
	wantNotFound(t, postPQ(t, env, "", "", hashes[16], nil), http.StatusOK)
}

// TestPersistedQueriesKeepNoInlineSecret: a text that writes a password
// inline (here in login's arguments, or as its variable's default) runs but
// is not stored, so its hash, which may travel in URLs and logs, does not
// sign anyone in; the same login with the password in a variable is stored
// as before.
func TestPersistedQueriesKeepNoInlineSecret(t *testing.T) {
	t.Parallel()
	cache := apq.NewMemoryCache(0)
	env := apitest.New(t, func(o *httpapi.Options) { o.PersistedQueries = cache })
	u := env.SignUp(t, "ann")
	inline := fmt.Sprintf(`mutation { login(email: %q, password: "correct horse") { token } }`, u.Email)

	// Stored before this rule (or by an older instance): found by its hash,
	// answered as unknown.
	cache.Add(t.Context(), sha(inline), inline)
	wantNotFound(t, postPQ(t, env, "", "", sha(inline), nil), http.StatusOK)
	byDefault := `mutation($email: String!, $password: String! = "correct horse") { login(email: $email, password: $password) { token } }`
	for _, c := range []struct {
		text string
		vars map[string]any
	}{{inline, nil}, {byDefault, map[string]any{"email": u.Email}}} {
		r := postPQ(t, env, "", c.text, sha(c.text), c.vars)
		if r.Status != http.StatusOK || len(r.Body.Errors) != 0 || !strings.Contains(string(r.Body.Data), `"token":"`) {
			t.Fatalf("login with the text %q: %d %s", c.text, r.Status, r.Raw)
		}
		wantNotFound(t, postPQ(t, env, "", "", sha(c.text), c.vars), http.StatusOK)
	}

	byVar := `mutation($email: String!, $password: String!) { login(email: $email, password: $password) { token } }`
	vars := map[string]any{"email": u.Email, "password": "correct horse"}
	if r := postPQ(t, env, "", byVar, sha(byVar), vars); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
		t.Fatalf("login with the password in a variable: %d %s", r.Status, r.Raw)
	}
	if r := postPQ(t, env, "", "", sha(byVar), vars); r.Status != http.StatusOK || len(r.Body.Errors) != 0 ||
		!strings.Contains(string(r.Body.Data), `"token":"`) {
		t.Fatalf("the same login by hash: %d %s", r.Status, r.Raw)
	}
	for outcome, want := range map[string]string{"secret": "2", "registered": "1", "hit": "1", "miss": "3"} {
		line := `taskflow_apq_requests_total{outcome="` + outcome + `"}`
		if got := metricValue(t, env, line); got != want {
			t.Errorf("%s = %q, want %s", line, got, want)
		}
	}
}

// TestInlineSecretsAreNotChargedToTheStoredTextsLimit: texts that write a
// password inline (login's argument, register's input field) are run and not
// stored, so they are not charged to the client network's allowance of stored
// texts (ratelimit.DefaultPersistedQueryKiBPerIP, 1 MiB): after 16 such texts
// of 64 KiB, a whole allowance, the same client still stores 16 texts of
// 64 KiB.
func TestInlineSecretsAreNotChargedToTheStoredTextsLimit(t *testing.T) {
	t.Parallel()
	many := ratelimit.Limit{Points: 100, Window: time.Hour}
	env, _ := limited(t, ratelimit.Config{LoginPerIP: many, LoginPerEmail: many}, nil, "")
	u := env.SignUp(t, "ann")
	pad := func(i int, op string) string {
		p := fmt.Sprintf("# %02d ", i)
		return p + strings.Repeat("x", apq.MaxQueryBytes-100-len(p)-len(op)) + "\n" + op
	}
	for i := range 16 {
		op := fmt.Sprintf(`mutation { login(email: %q, password: "correct horse") { token } }`, u.Email)
		if i == 15 {
			op = fmt.Sprintf(`mutation { register(input: {email: "ann-apq-%d@example.com", password: "correct horse", name: "Ann"}) { token } }`, i)
		}
		text := pad(i, op)
		r := postPQ(t, env, "", text, sha(text), nil)
		if r.Status != http.StatusOK || len(r.Body.Errors) != 0 || !strings.Contains(string(r.Body.Data), `"token":"`) {
			t.Fatalf("secret text %d: %d %.300s", i, r.Status, r.Raw)
		}
		wantNotFound(t, postPQ(t, env, "", "", sha(text), nil), http.StatusOK)
	}
	var hashes []string
	for i := range 16 {
		text := pad(i, "{ __typename }")
		hashes = append(hashes, sha(text))
		if r := postPQ(t, env, "", text, sha(text), nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
			t.Fatalf("text %d: %d %.300s", i, r.Status, r.Raw)
		}
	}
	for i, h := range hashes {
		if r := postPQ(t, env, "", "", h, nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
			t.Fatalf("text %d by hash, after 16 texts holding a secret: %d %.300s", i, r.Status, r.Raw)
		}
	}
	for outcome, want := range map[string]string{"secret": "16", "registered": "16", "unstored": ""} {
		line := `taskflow_apq_requests_total{outcome="` + outcome + `"}`
		if got := metricValue(t, env, line); got != want {
			t.Errorf("%s = %q, want %q", line, got, want)
		}
	}
}
