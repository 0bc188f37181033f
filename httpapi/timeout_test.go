package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/idempotency"
	"taskflow/ratelimit"
)

// shortTimeout is the REQUEST_TIMEOUT of these tests: long enough for an
// operation that waits for nothing, short for one that waits on a lock.
const shortTimeout = 300 * time.Millisecond

// timeoutEnv returns an Env whose operations are bounded by shortTimeout,
// charged by a limiter of 1000 points a day, logging to the buffer
// returned, and its fixture.
func timeoutEnv(t *testing.T) (*apitest.Env, fixture, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	// A budget that refills slowly: what the budget shows after a request is
	// what it was charged.
	env, _ := limited(t, ratelimit.Config{Points: 1000, Window: 24 * time.Hour}, nil, "", func(o *httpapi.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, nil))
		o.RequestTimeout = shortTimeout
	})
	return env, newFixture(t, env), logs
}

// holdLock runs sql (a lock) in a transaction of a connection of its own
// and returns the function that releases it (by rolling back; also when
// the test ends, or after lockSafety, so that a server without the bound
// answers, wrongly, instead of hanging the test).
func holdLock(t *testing.T, env *apitest.Env, sql string, args ...any) (release func()) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, env.DB.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	time.AfterFunc(lockSafety, release)
	return release
}

// lockSafety is how long holdLock holds a lock at most.
const lockSafety = 20 * time.Second

// assertNoLockWait fails the test unless, soon, no backend of env's database
// waits on a lock: the statement the deadline cut short was cancelled in
// Postgres too, not only in the server. It polls (the cancel request goes on
// a connection of its own) for at most half of lockSafety: after that
// holdLock lets go of the lock, and a statement left waiting on it would
// not be seen.
func assertNoLockWait(t *testing.T, env *apitest.Env) {
	t.Helper()
	eventually(t, lockSafety/2, "no backend waiting on the lock after the operation was answered TIMEOUT", func() bool {
		waiting := -1
		if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting == 0
	})
}

// timeoutLogged checks that the request id was logged once, at WARN (no
// ERROR: a timeout is no bug), naming the operation.
func timeoutLogged(t *testing.T, logs *syncBuffer, reqID, operation string) {
	t.Helper()
	if got := logs.warnings(t, reqID); len(got) != 1 || got[0] != "WARN" {
		t.Fatalf("logged %v for %s, want one record at WARN: %v", got, reqID, logs.lines(t))
	}
	for _, l := range logs.lines(t) {
		if l["request_id"] == reqID && l["level"] == "WARN" && l["operation"] != operation {
			t.Errorf("the WARN record names the operation %v, want %q: %v", l["operation"], operation, l)
		}
	}
}

// A mutation blocked on a row lock past REQUEST_TIMEOUT is answered TIMEOUT
// (200, no retryAfter: no one knows when the lock goes), logged at WARN
// with the request id and operation; its statement is cancelled in Postgres
// (no backend waits on the lock after the answer), nothing is committed,
// and it was charged. Once the lock is released, the same mutation with the
// same idempotency key succeeds, once: one change, one audit event, and a
// third send is a replay.
func TestMutationPastRequestTimeout(t *testing.T) {
	t.Parallel()
	env, fx, logs := timeoutEnv(t)
	release := holdLock(t, env, `SELECT id FROM tasks WHERE id = $1 FOR UPDATE`, fx.task)
	const update = `mutation Retitle($id: ID!) { updateTask(id: $id, input: {title: "late"}, idempotencyKey: "k-late") { id title } }`
	vars := map[string]any{"id": fx.task}

	r := env.Post(t, fx.token, update, vars, "X-Request-ID", "req-timeout")
	if r.Status != http.StatusOK || r.Code() != "TIMEOUT" || string(r.Body.Data) != "null" {
		t.Fatalf("HTTP %d %s, want 200 TIMEOUT and no data: %s", r.Status, r.Code(), r.Raw)
	}
	if got := retryAfter(r); got != 0 {
		t.Errorf("retryAfter %v on TIMEOUT: %s", got, r.Raw)
	}
	timeoutLogged(t, logs, "req-timeout", "Retitle")
	assertNoLockWait(t, env)
	// Charged as any operation that ran: the budget holds its price.
	left, _ := rateLimitHeader(t, r)
	if cost, _ := costExt(t, r); cost < 1 || left != 1000-int(cost) {
		t.Errorf("RateLimit r=%d after an operation of cost %v: not charged", left, cost)
	}
	if l, _ := rateLimitHeader(t, env.Post(t, fx.token, cheap, nil)); l != left-1 {
		t.Errorf("RateLimit r=%d after a query of cost 1, want %d: the timed-out operation was refunded", l, left-1)
	}

	release()
	var titles []string
	for i := range 2 {
		r := env.Post(t, fx.token, update, vars)
		var data struct{ UpdateTask struct{ Title string } }
		if err := json.Unmarshal(r.Body.Data, &data); err != nil || r.Code() != "" {
			t.Fatalf("retry %d: %v %s", i, err, r.Raw)
		}
		if replayed := r.Header.Get(idempotency.HeaderReplayed) == "true"; replayed != (i == 1) {
			t.Errorf("retry %d: Idempotent-Replayed %v", i, replayed)
		}
		titles = append(titles, data.UpdateTask.Title)
	}
	if titles[0] != "late" || titles[1] != "late" {
		t.Errorf("retries answered %v", titles)
	}
	var events int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_events
		WHERE action = 'task.updated' AND entity_id = $1`, fx.task).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("%d task.updated events, want 1: the change committed once", events)
	}
}

// A query whose read waits on a lock past REQUEST_TIMEOUT is answered
// TIMEOUT, by POST and by GET alike, logged at WARN, and its read cancelled
// in Postgres.
func TestQueryPastRequestTimeout(t *testing.T) {
	t.Parallel()
	env, fx, logs := timeoutEnv(t)
	holdLock(t, env, `LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE`)
	const read = `query Read($id: ID!) { task(id: $id) { id title } }`
	vars := map[string]any{"id": fx.task}
	for method, send := range map[string]func(id string) *apitest.Response{
		"POST": func(id string) *apitest.Response { return env.Post(t, fx.token, read, vars, "X-Request-ID", id) },
		"GET": func(id string) *apitest.Response {
			return get(t, env, read, vars, "Authorization", "Bearer "+fx.token, "X-Request-ID", id)
		},
	} {
		r := send("req-read-" + method)
		if r.Status != http.StatusOK || r.Code() != "TIMEOUT" {
			t.Fatalf("%s: HTTP %d %s, want 200 TIMEOUT: %s", method, r.Status, r.Code(), r.Raw)
		}
		timeoutLogged(t, logs, "req-read-"+method, "Read")
		assertNoLockWait(t, env)
	}
}

// Queries and mutations sent over the streaming transports are bounded as
// over plain HTTP: a mutation over a WebSocket and one over SSE, blocked on a
// row lock, are TIMEOUT, their statements cancelled. A subscription is not
// bounded: the WebSocket's subscription, open since before both timeouts,
// still gets the next change.
func TestStreamsAndRequestTimeout(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, func(o *httpapi.Options) { o.RequestTimeout = shortTimeout })
	ws := e.watchTasks(t, e.member)
	task := e.createTask(t, "locked")
	if c := nextTaskChange(t, ws, "1"); c.TaskID != task {
		t.Fatalf("first change of %s, want %s", c.TaskID, task)
	}
	release := holdLock(t, e.Env, `SELECT id FROM tasks WHERE id = $1 FOR UPDATE`, task)
	const update = `mutation($id: ID!) { updateTask(id: $id, input: {title: "late"}) { id } }`
	vars := map[string]any{"id": task}

	ws.Subscribe("m", update, vars)
	m := ws.Next()
	var p struct {
		Errors []struct{ Extensions map[string]any }
	}
	if err := json.Unmarshal(m.Payload, &p); err != nil || m.Type != "next" || m.ID != "m" || len(p.Errors) == 0 ||
		p.Errors[0].Extensions["code"] != "TIMEOUT" {
		t.Fatalf("mutation over the WebSocket: %s %s %s, want TIMEOUT", m.Type, m.ID, m.Payload)
	}
	if m := ws.Next(); m.Type != "complete" || m.ID != "m" {
		t.Fatalf("after the mutation's result: %s %s", m.Type, m.ID)
	}
	assertNoLockWait(t, e.Env)

	s := e.OpenSSE(t, e.owner.Token, update, vars)
	if ev, ok := s.Next(); !ok || ev.Event != "next" || !strings.Contains(ev.Data, `"code":"TIMEOUT"`) {
		t.Fatalf("mutation over SSE: %v %+v, want TIMEOUT", ok, ev)
	}
	assertNoLockWait(t, e.Env)

	release()
	after := e.createTask(t, "after")
	if c := nextTaskChange(t, ws, "1"); c.TaskID != after {
		t.Fatalf("the subscription got a change of %s, want %s", c.TaskID, after)
	}
}

// An operation may run until REQUEST_TIMEOUT ends it, however much of the
// server's WriteTimeout (60 s in server.go, counted from the request's
// headers) the request's body and the operation took: its answer's write
// deadline is the operation's own deadline and a margin. Here the server's
// WriteTimeout is 1 s and REQUEST_TIMEOUT 1.5 s: a query, by POST and by GET,
// waiting on a lock until its deadline is answered TIMEOUT, where its answer
// was lost (the connection closed without one).
func TestAnswerAfterTheServersWriteTimeout(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, func(o *httpapi.Options) { o.RequestTimeout = 1500 * time.Millisecond })
	fx := newFixture(t, env)
	srv := httptest.NewUnstartedServer(env.Handler)
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	holdLock(t, env, `LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE`)
	const read = `query Read($id: ID!) { task(id: $id) { id title } }`
	vars, _ := json.Marshal(map[string]any{"id": fx.task})
	body, _ := json.Marshal(map[string]any{"query": read, "variables": json.RawMessage(vars)})
	for method, req := range map[string]func() (*http.Request, error){
		"POST": func() (*http.Request, error) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/query", bytes.NewReader(body))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
			}
			return req, err
		},
		"GET": func() (*http.Request, error) {
			return http.NewRequest(http.MethodGet, srv.URL+"/query?"+url.Values{"query": {read}, "variables": {string(vars)}}.Encode(), nil)
		},
	} {
		r, err := req()
		if err != nil {
			t.Fatal(err)
		}
		apitest.SetHeaders(r, fx.token)
		res, err := srv.Client().Do(r)
		if err != nil {
			t.Fatalf("%s: no answer past the server's write timeout: %v", method, err)
		}
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"code":"TIMEOUT"`) {
			t.Fatalf("%s: HTTP %d %v %s, want 200 TIMEOUT", method, res.StatusCode, err, raw)
		}
	}
}

// An operation with several fields cut short by REQUEST_TIMEOUT logs one
// WARN line, with the number of fields, the operation's name and the
// request id; each field still answers TIMEOUT. Three updates of a locked
// task: the first waits on the lock until the deadline, the next two start
// past it.
func TestOneWarningPerOperationCutShort(t *testing.T) {
	t.Parallel()
	env, fx, logs := timeoutEnv(t)
	holdLock(t, env, `SELECT id FROM tasks WHERE id = $1 FOR UPDATE`, fx.task)
	const update = `mutation Retitles($id: ID!) {
		a: updateTask(id: $id, input: {title: "a"}) { id }
		b: updateTask(id: $id, input: {title: "b"}) { id }
		c: updateTask(id: $id, input: {title: "c"}) { id }
	}`
	r := env.Post(t, fx.token, update, map[string]any{"id": fx.task}, "X-Request-ID", "req-three")
	if len(r.Body.Errors) != 3 {
		t.Fatalf("%d errors, want 3 TIMEOUT: %s", len(r.Body.Errors), r.Raw)
	}
	for _, e := range r.Body.Errors {
		if ext, _ := e["extensions"].(map[string]any); ext["code"] != "TIMEOUT" {
			t.Errorf("error %v, want TIMEOUT", e)
		}
	}
	timeoutLogged(t, logs, "req-three", "Retitles")
	for _, l := range logs.lines(t) {
		if l["request_id"] == "req-three" && l["level"] == "WARN" && (l["fields"] != float64(3) || l["path"] != "a") {
			t.Errorf("the WARN record counts %v fields from %v, want 3 from a: %v", l["fields"], l["path"], l)
		}
	}
}
