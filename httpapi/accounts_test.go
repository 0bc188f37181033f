package httpapi_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
)

// hashingEnv is an API whose password hasher runs at most maxConcurrent
// hashes at once and waits at most wait for room, with its metrics on the
// API's /metrics.
// The test is a trusted proxy, so that requests with different
// X-Forwarded-For are different callers.
func hashingEnv(t *testing.T, maxConcurrent int, wait time.Duration) (*apitest.Env, *auth.Hasher) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := auth.NewHasher(auth.HasherOptions{Params: auth.FastPasswordParams, MaxConcurrent: maxConcurrent, Wait: wait, Registerer: reg})
	return apitest.New(t, func(o *httpapi.Options) {
		o.Registry, o.Hasher = reg, h
		o.TrustedProxies, _ = httpapi.ParseProxies("127.0.0.1/32,::1/128")
		huge := ratelimit.Limit{Points: 1 << 30, Window: time.Minute}
		o.Limiter = limiterWith(t, ratelimit.Config{Points: huge.Points, MaxCost: huge.Points,
			LoginPerIP: huge, LoginPerEmail: huge, RegisterPerIP: huge, Search: huge}, reg)
	}), h
}

// holdHashing takes the whole bound of h, as if that many hashes were
// running, until the returned release is called (or the test ends).
func holdHashing(t *testing.T, h *auth.Hasher) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	go func() {
		_ = h.Run(context.Background(), math.MaxUint32, func() { close(held); <-done })
	}()
	<-held
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	t.Cleanup(release)
	return release
}

// waitForMetric polls env's /metrics until series has the value want, for at
// most 2 minutes: a readiness poll on a gauge, not a timed assertion.
func waitForMetric(t *testing.T, env *apitest.Env, series, want string) {
	t.Helper()
	eventually(t, 2*time.Minute, series+" = "+want, func() bool { return metricValue(t, env, series) == want })
}

const registerOp = `mutation($e: String!) { register(input: {email: $e, password: "correct horse", name: "N"}) { token user { id } } }`

// Concurrent registrations (from as many addresses: one address's run one
// at a time, TestAnonymousOperationsRunInTheirCallersTurn) hash under the
// bound: while it is full, every one of them waits for it (none hashes
// beside it), and all succeed once there is room.
func TestRegistrationsWaitForTheHashingBound(t *testing.T) {
	t.Parallel()
	env, h := hashingEnv(t, 2, time.Hour)
	release := holdHashing(t, h)
	const n = 8
	statuses := make(chan string, n)
	for i := range n {
		go func() {
			r := env.Post(t, "", registerOp, map[string]any{"e": fmt.Sprintf("queued-%d@example.com", i)},
				"X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1))
			statuses <- fmt.Sprintf("%d %s", r.Status, r.Code())
		}()
	}
	waitForMetric(t, env, "taskflow_password_hashes_waiting", fmt.Sprint(n))
	if got := metricValue(t, env, "taskflow_password_hashes_in_flight"); got != "1" {
		t.Fatalf("in flight while the bound is held: %s, want 1 (the holder)", got)
	}
	var users int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM users`).Scan(&users); err != nil || users != 0 {
		t.Fatalf("%d users created while the bound was held (%v)", users, err)
	}
	release()
	for range n {
		if s := <-statuses; s != "200 " {
			t.Errorf("queued register: %s", s)
		}
	}
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM users`).Scan(&users); err != nil || users != n {
		t.Fatalf("%d users, want %d (%v)", users, n, err)
	}
	if got := metricValue(t, env, `taskflow_password_hashes_total{outcome="ok"}`); got != fmt.Sprint(n+1) {
		t.Errorf("ok hashes = %s, want %d", got, n+1)
	}
}

// A sign-up or sign-in whose hash finds no room in time is refused as a whole
// with 429, Retry-After and RATE_LIMITED, and changes and records nothing.
func TestHashingBusyIs429(t *testing.T) {
	t.Parallel()
	env, h := hashingEnv(t, 1, 10*time.Millisecond)
	known := env.SignUp(t, "Known")
	release := holdHashing(t, h)
	login := `mutation($e: String!) { login(email: $e, password: "correct horse") { token } }`
	for what, r := range map[string]*apitest.Response{
		"register":              env.Post(t, "", registerOp, map[string]any{"e": "busy@example.com"}),
		"login of an account":   env.Post(t, "", login, map[string]any{"e": known.Email}),
		"login of no account":   env.Post(t, "", login, map[string]any{"e": "nobody@example.com"}),
		"two registers at once": env.Post(t, "", `mutation { a: register(input: {email: "a@example.com", password: "correct horse", name: "A"}) { token } b: register(input: {email: "b@example.com", password: "correct horse", name: "B"}) { token } }`, nil),
	} {
		if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" || r.Header.Get("Cache-Control") != "no-store" ||
			r.Code() != "RATE_LIMITED" || r.Body.Data != nil || r.Body.Errors[0]["extensions"].(map[string]any)["retryAfter"] != float64(1) {
			t.Errorf("%s: %d %v %s", what, r.Status, r.Header, r.Raw)
		}
	}
	var users, events int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM audit_events)`).Scan(&users, &events); err != nil {
		t.Fatal(err)
	}
	if users != 1 || events != 1 { // Known and its user.registered
		t.Fatalf("%d users and %d events after refused calls, want 1 and 1", users, events)
	}
	if got := metricValue(t, env, `taskflow_password_hashes_total{outcome="busy"}`); got != "5" {
		t.Errorf("busy hashes = %s, want 5", got)
	}
	release()
	if r := env.Post(t, "", login, map[string]any{"e": known.Email}); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("login once there is room: %d %s", r.Status, r.Raw)
	}
}

// An anonymous caller's operation runs in its caller's turn (its address's),
// execution included: while one of its sign-ins waits for the hashing bound,
// its next request waits for the turn (not beside it at the hasher), and a
// signed-in user and another address are served.
func TestAnonymousOperationsRunInTheirCallersTurn(t *testing.T) {
	t.Parallel()
	env, h := hashingEnv(t, 4, time.Hour)
	known := env.SignUp(t, "Known")
	release := holdHashing(t, h)
	login := `mutation($e: String!) { login(email: $e, password: "correct horse") { token } }`
	first := make(chan *apitest.Response, 1)
	go func() {
		first <- env.Post(t, "", login, map[string]any{"e": known.Email}, "X-Forwarded-For", "192.0.2.1")
	}()
	waitForMetric(t, env, "taskflow_password_hashes_waiting", "1")
	second := make(chan *apitest.Response, 1)
	go func() {
		second <- env.Post(t, "", `{ __typename }`, nil, "X-Forwarded-For", "192.0.2.1")
	}()
	waitForMetric(t, env, "taskflow_ratelimit_turns_waiting", "1")
	if got := metricValue(t, env, "taskflow_password_hashes_waiting"); got != "1" {
		t.Fatalf("hashes waiting with the address's second request sent: %s, want 1 (it waits for its turn)", got)
	}
	if r := env.Post(t, known.Token, `{ me { id } }`, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("a signed-in user while an address's sign-in waits: %d %s", r.Status, r.Raw)
	}
	select {
	case r := <-second:
		t.Fatalf("the address's second request was served while its sign-in held the turn: %s", r.Raw)
	default:
	}
	release()
	for what, ch := range map[string]chan *apitest.Response{"the sign-in": first, "the next request": second} {
		if r := <-ch; r.Status != http.StatusOK || r.Code() != "" {
			t.Fatalf("%s: %d %s", what, r.Status, r.Raw)
		}
	}
}

// A register whose name is refused (empty, over 200 characters) is refused
// before its password is checked or hashed: a name of 1 MiB took the password
// rules 65-100 ms and an argon2id hash, all for a BAD_USER_INPUT.
func TestRegisterChecksTheNameBeforeThePassword(t *testing.T) {
	t.Parallel()
	env, _ := hashingEnv(t, 2, time.Hour)
	op := `mutation($n: String!) { register(input: {email: "named@example.com", password: "correct horse", name: $n}) { token } }`
	for what, name := range map[string]string{
		"empty":         "  ",
		"201 letters":   strings.Repeat("é", 201),
		"a MiB of them": strings.Repeat("xyz ", 250<<10),
	} {
		r := env.Post(t, "", op, map[string]any{"n": name})
		if r.Code() != "BAD_USER_INPUT" || !strings.Contains(string(r.Raw), "name") {
			t.Errorf("%s: %d %.300s", what, r.Status, r.Raw)
		}
	}
	if got := metricValue(t, env, `taskflow_password_hashes_total{outcome="ok"}`); got != "" && got != "0" {
		t.Errorf("%s passwords hashed for names that were refused", got)
	}
}
