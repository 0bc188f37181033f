package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/querydoc"
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
	t.Cleanup(func() { stalled.Close() }) // lets the server end, so a failure is reported
	if _, err := stalled.Write([]byte(`{"query":"{ me`)); err != nil {
		t.Fatal(err)
	}
	// A's first request holds A's turn (reading its body) before the second is sent.
	waitForMetric(t, env, "taskflow_ratelimit_turns_active", "1")
	second := make(chan *apitest.Response, 1)
	go func() { second <- env.Post(t, a.Token, `{ me { id } }`, nil) }()
	waitForMetric(t, env, "taskflow_ratelimit_turns_waiting", "1") // A's second request waits for A's turn
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

// A heavy document (querydoc.Heavy) executes in its caller's turn: the turn
// ends once it is answered, not once it is admitted. Seen through an upload,
// whose file is read only after admission and which cannot be answered before
// its file has arrived: once the operation has been charged (admitted), a
// light document's turn ends while the file is still on its way, a heavy
// one's does not.
func TestHeavyDocumentsExecuteInTheirCallersTurn(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newUnboundedFilesEnv(t, reg)
	for _, c := range []struct {
		name     string
		pad      int // __typename fields added to the mutation's selection set
		turnEnds bool
	}{
		{"light", 0, true},
		{"heavy", querydoc.HeavySelections, false},
	} {
		query := `mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id }` +
			strings.Repeat(" __typename", c.pad) + ` }`
		before := metricValue(t, e.Env, admitted)
		file, send := io.Pipe()
		t.Cleanup(func() { send.CloseWithError(io.ErrUnexpectedEOF) }) // lets the server end, so a failure is reported
		done := make(chan *apitest.Response, 1)
		go func() {
			done <- e.Upload(t, e.member.Token, query, map[string]any{"t": e.task, "f": nil},
				[]apitest.File{{Path: "f", Name: c.name + ".bin", Size: 4, Body: file}})
		}()
		// The light document's turn ends within microseconds of its
		// admission; the heavy one's cannot end before its file is sent, below.
		ended := turnEndsOnceAdmitted(t, e.Env, before)
		if ended != c.turnEnds {
			t.Fatalf("%s: the turn ended before the answer: %v, want %v", c.name, ended, c.turnEnds)
		}
		if _, err := send.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		send.Close()
		if r := <-done; r.Code() != "" || r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, r.Status, r.Raw)
		}
		if got := metricValue(t, e.Env, active); got != "0" {
			t.Fatalf("%s: a turn still held after the answer: %s", c.name, got)
		}
	}
}

// A caller's turns are paced by their CPU-bound work (ratelimit.TurnShare,
// package cpumeter), not by their length: a turn that waits 0.7 s for the
// client's body costs the caller nothing, while a heavy document whose
// execution takes 0.7 s (here, waiting on a row the test locks: a heavy
// document's execution is charged whole) makes the caller's next request wait
// more than MaxTurnPace, so it is refused at once with 429 and a Retry-After
// of that wait, and so are its event streams and WebSocket subscriptions;
// another caller is served.
func TestTurnsArePacedByTheirWork(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t, func(o *httpapi.Options) {
		o.Limiter = limiterWith(t, ratelimit.Config{Points: 1 << 30, MaxCost: 1 << 30}, nil)
	})
	long := time.Duration(float64(ratelimit.MaxTurnPace)*ratelimit.TurnShare) + ratelimit.TurnBurst + 100*time.Millisecond

	body, stalled := io.Pipe()
	done := make(chan *apitest.Response, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, e.Server.URL+"/query", body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+e.member.Token)
		done <- e.Do(t, req)
	}()
	if _, err := stalled.Write([]byte(`{"query":"{ me`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(long)
	if _, err := stalled.Write([]byte(` { id } }"}`)); err != nil {
		t.Fatal(err)
	}
	stalled.Close()
	if r := <-done; r.Code() != "" {
		t.Fatalf("a slow body: %s", r.Raw)
	}
	if r := e.Post(t, e.member.Token, `{ me { id } }`, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("after a turn spent waiting for the body: %d %s", r.Status, r.Raw)
	}

	tx, err := e.DB.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, e.task); err != nil {
		t.Fatal(err)
	}
	heavy := `mutation($t: ID!) { updateTask(id: $t, input: {title: "heavy"}) { id }` +
		strings.Repeat(" __typename", querydoc.HeavySelections) + ` }`
	go func() { done <- e.Post(t, e.member.Token, heavy, map[string]any{"t": e.task}) }()
	time.Sleep(long)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("the heavy document: %d %s", r.Status, r.Raw)
	}
	r := e.Post(t, e.member.Token, `{ me { id } }`, nil)
	retry, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || r.Code() != "RATE_LIMITED" || retry < int(ratelimit.MaxTurnPace/time.Second) ||
		r.Body.Errors[0]["extensions"].(map[string]any)["retryAfter"] != float64(retry) {
		t.Fatalf("the next request after a heavy turn of %s: %d %v %s", long, r.Status, r.Header, r.Raw)
	}
	// The streaming transports prepare their documents in the same turns.
	sub := `subscription { workspaceChanges(workspaceId: "` + e.ws + `") { __typename } }`
	if s := e.OpenSSE(t, e.member.Token, sub, nil); s.Res.StatusCode != http.StatusTooManyRequests || s.Res.Header.Get("Retry-After") == "" {
		t.Fatalf("an event stream of the paced caller: %d %v", s.Res.StatusCode, s.Res.Header)
	}
	ws := apitest.DialWS(t, e.Server.URL+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + e.member.Token}})
	ws.Subscribe("1", sub, nil)
	// gqlgen answers a document it could not prepare with its errors in a
	// next message, then complete.
	if m := ws.Next(); m.Type != "next" || !strings.Contains(string(m.Payload), `"RATE_LIMITED"`) {
		t.Fatalf("a WebSocket subscription of the paced caller: %s %s", m.Type, m.Payload)
	}
	if r := e.Post(t, e.owner.Token, `{ me { id } }`, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("another caller: %d %s", r.Status, r.Raw)
	}
	if s := e.OpenSSE(t, e.owner.Token, sub, nil); s.Res.StatusCode != http.StatusOK {
		t.Fatalf("another caller's event stream: %d", s.Res.StatusCode)
	}
}

// A heavy document and an anonymous caller's operation execute in their
// caller's turn whatever the transport: over an event stream and over a
// WebSocket as over a plain POST, the turn ends once the operation is
// answered, not once it is admitted. Seen through an execution the test holds
// up: the heavy mutation waits on the task's row, the anonymous login on its
// user's row (its new session refers to it).
func TestHeavyAndAnonymousOperationsKeepTheirTurnOnEveryTransport(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newUnboundedFilesEnv(t, reg)
	heavy := `mutation($t: ID!) { updateTask(id: $t, input: {title: "heavy"}) { id }` +
		strings.Repeat(" __typename", querydoc.HeavySelections) + ` }`
	signer := e.SignUp(t, "Signer")
	login := `mutation($e: String!) { login(email: $e, password: "correct horse") { token } }`
	// Each transport sends the operation and returns its one result's JSON.
	transports := map[string]func(token, query string, vars map[string]any) string{
		"POST": func(token, query string, vars map[string]any) string {
			return string(e.Post(t, token, query, vars).Raw)
		},
		"SSE": func(token, query string, vars map[string]any) string {
			s := e.OpenSSE(t, token, query, vars)
			ev, _ := s.Next()
			return fmt.Sprintf("%d %s", s.Res.StatusCode, ev.Data)
		},
		"WebSocket": func(token, query string, vars map[string]any) string {
			o := apitest.WSOptions{}
			if token != "" {
				o.Init = map[string]any{"Authorization": "Bearer " + token}
			}
			ws := apitest.DialWS(t, e.Server.URL+"/query", o)
			ws.Subscribe("1", query, vars)
			m := ws.Next()
			return m.Type + " " + string(m.Payload)
		},
	}
	// A heavy document's execution is charged to its caller's pace whole
	// (here, the time it is held up): each transport's is another caller's.
	callers := map[string]apitest.User{"POST": e.owner, "SSE": e.admin, "WebSocket": e.member}
	for _, name := range []string{"POST", "SSE", "WebSocket"} {
		send := transports[name]
		for _, c := range []struct {
			what, token, query string
			vars               map[string]any
			hold               string // the SQL that holds the execution up until the test commits
			want               string // in the answer
		}{
			{"heavy", callers[name].Token, heavy, map[string]any{"t": e.task},
				`SELECT 1 FROM tasks WHERE id = '` + e.task + `' FOR UPDATE`, `"title"`},
			{"anonymous", "", login, map[string]any{"e": signer.Email},
				`SELECT 1 FROM users WHERE id = '` + signer.ID + `' FOR UPDATE`, `"login":{"token":"`},
		} {
			if c.what == "heavy" {
				c.want = `"updateTask":{"id":"` + e.task + `"`
			}
			tx, err := e.DB.Pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background()) // a no-op after the commit
			if _, err := tx.Exec(t.Context(), c.hold); err != nil {
				t.Fatalf("%s: %v", c.hold, err)
			}
			before := metricValue(t, e.Env, admitted)
			done := make(chan string, 1)
			go func() { done <- send(c.token, c.query, c.vars) }()
			// The operation is admitted, then held up in its execution
			// until the commit below; its turn cannot end before that.
			ended := turnEndsOnceAdmitted(t, e.Env, before)
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			answer := <-done
			if ended {
				t.Errorf("%s, %s operation: its turn ended while it was still executing", name, c.what)
			}
			if !strings.Contains(answer, c.want) {
				t.Fatalf("%s, %s operation: answered %s", name, c.what, answer)
			}
			// The turn ends as the answer goes.
			eventually(t, time.Minute, fmt.Sprintf("%s, %s operation: its turn ended after the answer", name, c.what),
				func() bool { return metricValue(t, e.Env, active) == "0" })
		}
	}
}

// The metrics the turn tests read: operations admitted, and turns held.
const (
	admitted = `taskflow_ratelimit_operations_total{limit="cost",outcome="allowed"}`
	active   = "taskflow_ratelimit_turns_active"
)

// newUnboundedFilesEnv is newFilesEnv with a limiter whose budget and cost
// bound no test reaches, its metrics in reg: turns without refusals.
func newUnboundedFilesEnv(t *testing.T, reg *prometheus.Registry) *filesEnv {
	t.Helper()
	return newFilesEnv(t, func(o *httpapi.Options) {
		o.Registry = reg
		o.Limiter = limiterWith(t, ratelimit.Config{Points: 1 << 30, MaxCost: 1 << 30}, reg)
	})
}

// turnEndsOnceAdmitted waits until an operation is admitted (the admitted
// counter leaves before), then reports whether no turn is held within about a
// second. Readiness polls on the metrics, not timing assertions.
func turnEndsOnceAdmitted(t *testing.T, e *apitest.Env, before string) bool {
	t.Helper()
	eventually(t, 2*time.Minute, "an operation admitted", func() bool { return metricValue(t, e, admitted) != before })
	for i := 0; i < 200; i++ {
		if metricValue(t, e, active) == "0" {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}
