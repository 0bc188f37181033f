package httpapi_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
)

// warnings returns the level of every record at WARN or above logged with
// the request id id.
func (s *syncBuffer) warnings(t *testing.T, id string) []string {
	t.Helper()
	var levels []string
	for _, l := range s.lines(t) {
		if l["request_id"] == id && (l["level"] == "WARN" || l["level"] == "ERROR") {
			levels = append(levels, fmt.Sprint(l["level"]))
		}
	}
	return levels
}

// retryAfter returns extensions.retryAfter of the first error of r, or 0.
func retryAfter(r *apitest.Response) float64 {
	if len(r.Body.Errors) == 0 {
		return 0
	}
	ext, _ := r.Body.Errors[0]["extensions"].(map[string]any)
	n, _ := ext["retryAfter"].(float64)
	return n
}

// A mutation Postgres refuses for a reason of the moment (a deadlock, too
// many connections: store.Transient) is UNAVAILABLE with retryAfter, logged
// at WARN (not ERROR: no bug, no page), and nothing is committed; the retry
// with the same idempotency key, once the moment has passed, creates the task
// once. An error nothing knows (a trigger's plain RAISE) stays INTERNAL,
// logged at ERROR.
func TestTransientFailureOfAMutationIsUnavailable(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	env := apitest.New(t, func(o *httpapi.Options) { o.Log = slog.New(slog.NewJSONHandler(&logs, nil)) })
	fx := newFixture(t, env)
	ctx := t.Context()
	exec := func(sql string) {
		t.Helper()
		if _, err := env.DB.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	create := `mutation($p: ID!, $k: String) { createTask(input: {projectId: $p, title: "once"}, idempotencyKey: $k) { id } }`
	for i, c := range []struct{ state, code, level string }{
		{"40P01", "UNAVAILABLE", "WARN"}, // deadlock_detected
		{"53300", "UNAVAILABLE", "WARN"}, // too_many_connections
		{"40001", "UNAVAILABLE", "WARN"}, // serialization_failure
		{"P0001", "INTERNAL", "ERROR"},   // raise_exception: nothing knows it, a bug
	} {
		exec(`CREATE OR REPLACE FUNCTION refuse_task() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '` + c.state + `'; END$$`)
		exec(`CREATE TRIGGER refuse_task BEFORE INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION refuse_task()`)
		key := fmt.Sprintf("key-%d", i)
		reqID := fmt.Sprintf("req-%s", c.state)
		before := storetest.Snapshot(t, env.DB.Pool)
		r := env.Post(t, fx.token, create, map[string]any{"p": fx.project, "k": key}, "X-Request-ID", reqID)
		if r.Code() != c.code || r.Status != http.StatusOK || string(r.Body.Data) != `{"createTask":null}` &&
			string(r.Body.Data) != "null" {
			t.Errorf("%s: HTTP %d %s, want 200 %s: %s", c.state, r.Status, r.Code(), c.code, r.Raw)
		}
		if got := retryAfter(r); (c.code == "UNAVAILABLE") != (got == 1) {
			t.Errorf("%s: retryAfter %v: %s", c.state, got, r.Raw)
		}
		storetest.AssertUnchanged(t, env.DB.Pool, before, c.state)
		if got := logs.warnings(t, reqID); len(got) != 1 || got[0] != c.level {
			t.Errorf("%s: logged %v, want one record at %s", c.state, got, c.level)
		}
		exec(`DROP TRIGGER refuse_task ON tasks`)
		if c.code != "UNAVAILABLE" {
			continue
		}
		var ids []string
		for range 2 {
			r := env.Post(t, fx.token, create, map[string]any{"p": fx.project, "k": key})
			var data struct{ CreateTask struct{ ID string } }
			if err := json.Unmarshal(r.Body.Data, &data); err != nil || r.Code() != "" {
				t.Fatalf("%s: retry: %v %s", c.state, err, r.Raw)
			}
			ids = append(ids, data.CreateTask.ID)
		}
		if ids[0] == "" || ids[0] != ids[1] {
			t.Errorf("%s: retries created %v, want one task", c.state, ids)
		}
	}
	var n int
	if err := env.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE title = 'once'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d tasks created, want 3 (one for each transient failure retried)", n)
	}
}

// lockedEnv returns an Env logging to the buffer returned, its fixture, and
// table locked (lockTable).
func lockedEnv(t *testing.T, table string) (*apitest.Env, fixture, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	env := apitest.New(t, func(o *httpapi.Options) { o.Log = slog.New(slog.NewJSONHandler(logs, nil)) })
	fx := newFixture(t, env)
	lockTable(t, env, table)
	return env, fx, logs
}

// lockTable makes every new connection of env's pool give up a lock after
// 50 ms (lock_timeout: SQLSTATE 55P03, store.Transient), and holds table
// locked until the test ends: a read of it fails for a reason of the moment.
func lockTable(t *testing.T, env *apitest.Env, table string) {
	t.Helper()
	ctx := t.Context()
	if _, err := env.DB.Pool.Exec(ctx, `DO $$BEGIN
		EXECUTE format('ALTER DATABASE %I SET lock_timeout = ''50ms''', current_database()); END$$`); err != nil {
		t.Fatal(err)
	}
	env.DB.Pool.Reset() // the connections made from now on have the setting
	conn, err := pgx.Connect(ctx, env.DB.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
}

// A query whose read fails for a reason of the moment (a lock not available)
// is UNAVAILABLE with retryAfter, logged at WARN.
func TestTransientFailureOfAQueryIsUnavailable(t *testing.T) {
	t.Parallel()
	env, fx, logs := lockedEnv(t, "tasks")
	r := env.Post(t, fx.token, `query($id: ID!) { task(id: $id) { id title } }`, map[string]any{"id": fx.task},
		"X-Request-ID", "req-query")
	if r.Code() != "UNAVAILABLE" || r.Status != http.StatusOK || retryAfter(r) != 1 {
		t.Errorf("HTTP %d %s retryAfter %v, want 200 UNAVAILABLE 1: %s", r.Status, r.Code(), retryAfter(r), r.Raw)
	}
	if got := logs.warnings(t, "req-query"); len(got) != 1 || got[0] != "WARN" {
		t.Errorf("logged %v, want one record at WARN", got)
	}
}

// Outside GraphQL the same failure is 503 UNAVAILABLE with Retry-After: an
// audit export whose check of the caller's membership fails for a reason of
// the moment.
func TestTransientFailureOfAnExportIsUnavailable(t *testing.T) {
	t.Parallel()
	env, fx, logs := lockedEnv(t, "members")
	req, err := http.NewRequest(http.MethodGet, env.Server.URL+"/audit/export?workspaceId="+fx.workspace, nil)
	if err != nil {
		t.Fatal(err)
	}
	apitest.SetHeaders(req, fx.token, "X-Request-ID", "req-export")
	r := env.Do(t, req)
	if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Header.Get("Retry-After") != "1" ||
		retryAfter(r) != 1 {
		t.Errorf("HTTP %d %s Retry-After %q, want 503 UNAVAILABLE 1: %s", r.Status, r.Code(), r.Header.Get("Retry-After"), r.Raw)
	}
	// The cause, and the access line of a 503: no ERROR, no page.
	if got := logs.warnings(t, "req-export"); len(got) != 2 || got[0] != "WARN" || got[1] != "WARN" {
		t.Errorf("logged %v, want two records at WARN: %v", got, logs.lines(t))
	}
}
