package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coderws "github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
	"taskflow/store"
	"taskflow/store/storetest"
)

// tokenLookups is a pgx tracer counting the reads of bearer tokens
// (store's readSession) a pool sends.
type tokenLookups struct{ n atomic.Int64 }

func (c *tokenLookups) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM tokens t JOIN users u") {
		c.n.Add(1)
	}
	return ctx
}

func (*tokenLookups) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// badTokenEnv is an Env whose pool counts token lookups, with a limiter in
// Redis under prefix allowing badTokens invalid tokens per client network
// (one back a second), and TRUSTED_PROXIES set so that X-Forwarded-For
// names the client.
func badTokenEnv(t *testing.T, db *store.DB, prefix string, badTokens int) *apitest.Env {
	t.Helper()
	return badTokenEnvPer(t, db, prefix, badTokens, time.Duration(badTokens)*time.Second)
}

// badToken sends env a query with a token no user has, from client.
func badToken(t *testing.T, env *apitest.Env, client string) *apitest.Response {
	t.Helper()
	return env.Post(t, auth.NewToken(), `{ __typename }`, nil, "X-Forwarded-For", client)
}

// badTokenEnvPer is badTokenEnv with badTokens invalid tokens per window.
func badTokenEnvPer(t *testing.T, db *store.DB, prefix string, badTokens int, window time.Duration) *apitest.Env {
	t.Helper()
	lim, err := ratelimit.New(ratelimit.Options{
		Config:    ratelimit.Config{BadTokenPerIP: ratelimit.Limit{Points: badTokens, Window: window}},
		Redis:     ratelimittest.Redis(t),
		KeyPrefix: prefix, Log: quiet, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	return apitest.NewOn(t, db, func(o *httpapi.Options) {
		o.Limiter = lim
		o.TrustedProxies, _ = httpapi.ParseProxies("127.0.0.1/32,::1/128")
	})
}

// tracedDB is a store on a pool of its own whose token lookups lookups counts.
func tracedDB(t *testing.T) (*store.DB, *tokenLookups) {
	lookups := &tokenLookups{}
	return store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = lookups }), nil), lookups
}

// A client that sends made-up bearer tokens is charged for each
// (RATE_LIMIT_BAD_TOKENS_PER_IP): past its budget it is answered 429 with
// Retry-After, and its tokens are no longer looked up in Postgres, until
// then. Valid tokens the instance remembers, from that network too, and
// valid tokens from other networks, are served as before.
func TestBadTokensAreLimitedPerNetwork(t *testing.T) {
	t.Parallel()
	db, lookups := tracedDB(t)
	env := badTokenEnv(t, db, ratelimittest.Prefix(), 5)
	const flooder, other = "198.51.100.7", "203.0.113.9"
	cached, fresh := env.NewUser(t, "Cached"), env.NewUser(t, "Fresh")
	if res := env.Post(t, cached.Token, `{ me { id } }`, nil, "X-Forwarded-For", flooder); res.Status != http.StatusOK || res.Code() != "" {
		t.Fatalf("valid token: %d %s", res.Status, res.Raw)
	}
	before := lookups.n.Load()
	for i := range 5 {
		res := badToken(t, env, flooder)
		if res.Status != http.StatusUnauthorized || res.Code() != "UNAUTHENTICATED" {
			t.Fatalf("bad token %d within the budget: %d %s", i, res.Status, res.Raw)
		}
	}
	if n := lookups.n.Load() - before; n != 5 {
		t.Fatalf("%d token lookups for 5 bad tokens", n)
	}
	res := badToken(t, env, flooder)
	if res.Status != http.StatusTooManyRequests || res.Code() != "RATE_LIMITED" {
		t.Fatalf("bad token past the budget: %d %s", res.Status, res.Raw)
	}
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 2 {
		t.Fatalf("Retry-After %q", res.Header.Get("Retry-After"))
	}
	if ext, _ := res.Body.Errors[0]["extensions"].(map[string]any); ext["retryAfter"] != float64(retry) {
		t.Fatalf("extensions %v, Retry-After %d", ext, retry)
	}
	refusedAt, lookedUp := time.Now(), lookups.n.Load()
	for i := range 30 {
		res := badToken(t, env, flooder)
		if res.Status != http.StatusTooManyRequests || res.Code() != "RATE_LIMITED" || res.Header.Get("Retry-After") == "" {
			t.Fatalf("bad token %d while refused: %d %s", i, res.Status, res.Raw)
		}
	}
	for _, path := range []string{"/audit/export", "/attachments/00000000-0000-0000-0000-000000000000"} {
		req, _ := http.NewRequest(http.MethodGet, env.Server.URL+path, nil)
		apitest.SetHeaders(req, auth.NewToken(), "X-Forwarded-For", flooder)
		if res := env.Do(t, req); res.Status != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s with a bad token while refused: %d %s", path, res.Status, res.Raw)
		}
	}
	if n := lookups.n.Load() - lookedUp; n != 0 {
		t.Fatalf("%d token lookups while the client was refused", n)
	}
	if res := env.Post(t, cached.Token, `{ me { id } }`, nil, "X-Forwarded-For", flooder); res.Status != http.StatusOK || res.Code() != "" {
		t.Fatalf("remembered valid token from the refused network: %d %s", res.Status, res.Raw)
	}
	if res := env.Post(t, fresh.Token, `{ me { id } }`, nil, "X-Forwarded-For", other); res.Status != http.StatusOK || res.Code() != "" {
		t.Fatalf("valid token from another network: %d %s", res.Status, res.Raw)
	}
	time.Sleep(time.Until(refusedAt.Add(time.Duration(retry) * time.Second)))
	lookedUp = lookups.n.Load()
	res = badToken(t, env, flooder)
	if res.Status != http.StatusUnauthorized || res.Code() != "UNAUTHENTICATED" {
		t.Fatalf("bad token after Retry-After: %d %s", res.Status, res.Raw)
	}
	if n := lookups.n.Load() - lookedUp; n != 1 {
		t.Fatalf("%d token lookups after Retry-After, want 1", n)
	}
}

// Valid tokens are never charged: many users behind one address whose
// tokens the instance does not remember (after a deploy) are all served,
// and the address's budget of bad tokens is whole after them.
func TestValidTokensDoNotSpendTheBadTokenBudget(t *testing.T) {
	t.Parallel()
	db, _ := tracedDB(t)
	env := badTokenEnv(t, db, ratelimittest.Prefix(), 3)
	const office = "192.0.2.44"
	for i := range 10 {
		u := env.NewUser(t, "Office")
		if res := env.Post(t, u.Token, `{ me { id } }`, nil, "X-Forwarded-For", office); res.Status != http.StatusOK || res.Code() != "" {
			t.Fatalf("valid token %d: %d %s", i, res.Status, res.Raw)
		}
	}
	for i := range 3 {
		if res := badToken(t, env, office); res.Status != http.StatusUnauthorized {
			t.Fatalf("bad token %d after valid ones: %d %s", i, res.Status, res.Raw)
		}
	}
}

// The budget is shared by the instances (in Redis): bad tokens sent to one
// are counted by the other.
func TestBadTokenBudgetHoldsAcrossInstances(t *testing.T) {
	t.Parallel()
	db, lookups := tracedDB(t)
	prefix := ratelimittest.Prefix()
	a, b := badTokenEnv(t, db, prefix, 4), badTokenEnv(t, db, prefix, 4)
	const client = "198.51.100.99"
	for i, env := range []*apitest.Env{a, b, a, b} {
		if res := badToken(t, env, client); res.Status != http.StatusUnauthorized {
			t.Fatalf("bad token %d: %d %s", i, res.Status, res.Raw)
		}
	}
	if res := badToken(t, b, client); res.Status != http.StatusTooManyRequests {
		t.Fatalf("fifth bad token, on the second instance: %d %s", res.Status, res.Raw)
	}
	lookedUp := lookups.n.Load()
	if res := badToken(t, b, client); res.Status != http.StatusTooManyRequests {
		t.Fatalf("bad token while refused: %d %s", res.Status, res.Raw)
	}
	if n := lookups.n.Load() - lookedUp; n != 0 {
		t.Fatalf("%d token lookups while refused", n)
	}
}

// A WebSocket's connection_init token is charged as a header's: past the
// budget the connection closes with 4429, the reason saying when to retry,
// and the token is not looked up.
func TestBadTokensAtConnectionInit(t *testing.T) {
	t.Parallel()
	db, lookups := tracedDB(t)
	env := badTokenEnv(t, db, ratelimittest.Prefix(), 2)
	dial := func() error {
		ws, _, err := apitest.TryDialWS(t, env.Server.URL+"/query", apitest.WSOptions{
			Header: http.Header{"X-Forwarded-For": {"198.51.100.200"}},
			Init:   map[string]any{"Authorization": "Bearer " + auth.NewToken()}})
		if err == nil {
			_, err = ws.TryNext()
		}
		return err
	}
	for i := range 2 {
		if err := dial(); coderws.CloseStatus(err) != httpapi.CloseUnauthorized {
			t.Fatalf("bad token %d at connection_init: %v", i, err)
		}
	}
	err := dial()
	var ce coderws.CloseError
	if !errors.As(err, &ce) || ce.Code != httpapi.CloseTooManyRequests || !strings.Contains(ce.Reason, "retry in") {
		t.Fatalf("bad token past the budget at connection_init: %v", err)
	}
	lookedUp := lookups.n.Load()
	if err := dial(); coderws.CloseStatus(err) != httpapi.CloseTooManyRequests {
		t.Fatalf("bad token while refused: %v", err)
	}
	if n := lookups.n.Load() - lookedUp; n != 0 {
		t.Fatalf("%d token lookups while refused", n)
	}
}

// A WebSocket connection checks its token again for each query or mutation
// (inTurn), and a token revoked since connection_init is charged there as
// at connection_init: the client's first invalid tokens are UNAUTHENTICATED,
// then its operations are RATE_LIMITED with retryAfter, on the connection
// and over HTTP alike. A budget of 2 an hour: no point comes back during the
// test, whatever its pace.
func TestBadTokensOnWebSocketOperations(t *testing.T) {
	t.Parallel()
	db, _ := tracedDB(t)
	env := badTokenEnvPer(t, db, ratelimittest.Prefix(), 2, time.Hour)
	const client = "198.51.100.201"
	u := env.NewUser(t, "Leaving")
	ws := apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{
		Header: http.Header{"X-Forwarded-For": {client}},
		Init:   map[string]any{"Authorization": "Bearer " + u.Token}})
	if ws.Ack.Type != "connection_ack" {
		t.Fatalf("connection_init answered %+v", ws.Ack)
	}
	// Revoked through this instance: refused here at once, without a wait.
	if res := env.Post(t, u.Token, `mutation { logout }`, nil); res.Code() != "" {
		t.Fatalf("logout: %s", res.Raw)
	}
	// operation runs a query on the connection and returns its error's
	// extensions (a refused operation's next, or error, message).
	operation := func(id string) map[string]any {
		t.Helper()
		ws.Subscribe(id, `{ __typename }`, nil)
		m := ws.Next()
		var answer struct {
			Errors []struct{ Extensions map[string]any }
		}
		raw := m.Payload
		if m.Type == "error" {
			raw = []byte(`{"errors":` + string(m.Payload) + `}`)
		}
		if m.ID != id || (m.Type != "next" && m.Type != "error") || json.Unmarshal(raw, &answer) != nil || len(answer.Errors) != 1 {
			t.Fatalf("operation %s: %s %s %s, want one error", id, m.Type, m.ID, m.Payload)
		}
		if m.Type == "next" {
			if c := ws.Next(); c.Type != "complete" || c.ID != id {
				t.Fatalf("operation %s: %s %s after its answer, want its complete", id, c.Type, c.ID)
			}
		}
		return answer.Errors[0].Extensions
	}
	for i := range 2 {
		if ext := operation(strconv.Itoa(i)); ext["code"] != "UNAUTHENTICATED" {
			t.Fatalf("operation %d with the revoked token, within the budget: %v", i, ext)
		}
	}
	for i := 2; i < 4; i++ {
		ext := operation(strconv.Itoa(i))
		if retry, _ := ext["retryAfter"].(float64); ext["code"] != "RATE_LIMITED" || retry < 1 {
			t.Fatalf("operation %d with the revoked token, past the budget: %v, want RATE_LIMITED with retryAfter", i, ext)
		}
	}
	// The same budget over HTTP.
	if res := badToken(t, env, client); res.Status != http.StatusTooManyRequests {
		t.Fatalf("a bad token over HTTP from the same client: %d %s", res.Status, res.Raw)
	}
}
