package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
)

// limiterWith returns an in-process limiter with cfg whose metrics go to reg.
func limiterWith(t *testing.T, cfg ratelimit.Config, reg prometheus.Registerer) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Options{Config: cfg, Registerer: reg, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Each caller's requests take turns through reading, parsing and validating
// (ratelimit.Limiter.Turn): while a request of A holds A's turn (here, its
// body is still arriving), A's next request waits and B's is served.
func TestCallersTakeTurnsBeforeExecution(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Registry = reg
		o.Limiter = limiterWith(t, ratelimit.Config{Points: 1 << 30, MaxCost: 1 << 30}, reg)
	})
	a, b := env.NewUser(t, "Turn A"), env.NewUser(t, "Turn B")

	body, stalled := io.Pipe()
	first := make(chan *apitest.Response, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, env.Server.URL+"/query", body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+a.Token)
		first <- env.Do(t, req)
	}()
	if _, err := stalled.Write([]byte(`{"query":"{ me`)); err != nil {
		t.Fatal(err)
	}
	// A's first request holds A's turn (reading its body) before the second is sent.
	poll := func(series, want string) bool {
		for range 2000 { // readiness poll on a gauge, not a timing assertion
			if metricValue(t, env, series) == want {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	if !poll("taskflow_ratelimit_turns_active", "1") {
		stalled.Close()
		t.Fatal("A's first request never took A's turn")
	}
	second := make(chan *apitest.Response, 1)
	go func() { second <- env.Post(t, a.Token, `{ me { id } }`, nil) }()
	if !poll("taskflow_ratelimit_turns_waiting", "1") {
		stalled.Close() // lets the server end, so the failure is reported
		t.Fatal("A's second request never waited for A's turn")
	}
	if r := env.Post(t, b.Token, `{ me { id } }`, nil); r.Code() != "" {
		t.Fatalf("B while A's turn is held: %s", r.Raw)
	}
	select {
	case r := <-second:
		t.Fatalf("A's second request was served while A's first held the turn: %s", r.Raw)
	default:
	}
	if _, err := stalled.Write([]byte(` { id } }"}`)); err != nil {
		t.Fatal(err)
	}
	stalled.Close()
	for _, ch := range []chan *apitest.Response{first, second} {
		if r := <-ch; r.Code() != "" || string(r.Body.Data) != `{"me":{"id":"`+a.ID+`"}}` {
			t.Fatalf("A: %s", r.Raw)
		}
	}
}
