package scaleout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// heldBackend polls until a backend of the test database waits for the lock
// on audit_events, and returns its pid (a readiness poll, not a timing
// assertion).
func heldBackend(t testing.TB, pool *pgxpool.Pool) int32 {
	t.Helper()
	for range 800 {
		var pid int32
		err := pool.QueryRow(context.Background(), `SELECT l.pid FROM pg_locks l
			WHERE l.locktype = 'relation' AND NOT l.granted AND l.relation = 'audit_events'::regclass
			LIMIT 1`).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("no backend ever waits for the lock on audit_events")
	return 0
}

// Postgres cut while a keyed createTask is inside its transaction (its whole
// unit of work, COMMIT included, sent in one pipeline; its task inserted, its
// key claimed, the insert of its audit event waiting for a lock): the client
// gets UNAVAILABLE at once, while Postgres would still make the orphaned
// transaction wait. What Postgres then does with the pipeline it already
// holds is all or nothing: the task, its audit event and its key's record
// were committed together, or none of them (as with any COMMIT whose answer
// is lost). When Postgres is reachable again, the same request with the same
// key gives one task either way: it runs the mutation, or replays the one that
// committed; a second retry replays it, and the process keeps no goroutine or
// connection from the outage.
func TestPostgresCutMidTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, proxy, in := startBehindProxy(t)
	const maxConns = proxiedPoolMax

	_, token := newUser(t, pool, "ann")
	project := newProject(t, in, token)
	read := `query($id: ID!) { project(id: $id) { name tasks { nodes { id } } } }`
	for i := range 10 { // warm the pool
		in.mustPost(t, token, createTask, taskVars(project, i))
		in.mustPost(t, token, read, map[string]any{"id": project})
	}
	tasksBefore := count(t, pool, `SELECT count(*) FROM tasks`)
	eventsBefore := count(t, pool, `SELECT count(*) FROM audit_events`)
	keysBefore := count(t, pool, `SELECT count(*) FROM idempotency_keys`)
	goroutinesBefore := steadyGoroutines(t, in, pool)

	// Hold a lock on audit_events that its inserts wait for, so that the
	// mutation stops inside its transaction at its last batch, right before
	// COMMIT.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	// (The owner gave up UPDATE on the log; the grant that allows the lock
	// lasts as long as the holder's transaction.)
	if _, err := holder.Exec(ctx, `GRANT UPDATE ON audit_events TO CURRENT_USER; LOCK TABLE audit_events IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	vars := taskVars(project, 100)
	type answer struct {
		r   *response
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		r, err := in.post(token, createTask, vars)
		answers <- answer{r, err}
	}()
	orphan := heldBackend(t, pool)
	select {
	case a := <-answers:
		t.Fatalf("the mutation answered while its transaction waits for the lock: %v %v", a.err, a.r)
	default:
	}

	proxy.cut()
	// The answer comes while the lock is still held: the server does not wait
	// for Postgres to end the orphaned transaction.
	a := <-answers
	if a.err != nil {
		t.Fatalf("createTask cut mid-transaction: %v (a hang ends in the client's timeout)", a.err)
	}
	if a.r.code() != "UNAVAILABLE" || a.r.Status >= 500 && a.r.Status != 503 {
		t.Errorf("createTask cut mid-transaction: want UNAVAILABLE (200 or 503), got %s", a.r)
	}
	if task := a.r.field("createTask"); task != nil {
		t.Errorf("createTask cut mid-transaction answered a task: %s", a.r)
	}

	// Let the orphaned transaction go on: Postgres finds its client gone and
	// rolls it back.
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	gone := false
	for range 800 { // readiness poll on the orphaned backend
		if count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, orphan) == 0 {
			gone = true
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if !gone {
		t.Fatalf("the orphaned backend %d never ends", orphan)
	}
	title := vars["in"].(map[string]any)["title"]
	key := vars["key"]
	committed := count(t, pool, `SELECT count(*) FROM idempotency_keys WHERE key = $1`, key)
	tasks := count(t, pool, `SELECT count(*) FROM tasks`) - tasksBefore
	events := count(t, pool, `SELECT count(*) FROM audit_events`) - eventsBefore
	if committed > 1 || tasks != committed || events != committed {
		t.Errorf("after the cut: %d new tasks, %d new audit events, %d records of the key: want all or nothing",
			tasks, events, committed)
	}

	proxy.restore()
	// Retry with the same key, as a client does after UNAVAILABLE; attempts on
	// connections the pool has not yet found dead would fail with UNAVAILABLE too.
	var first *response
	for range 400 {
		r, err := in.post(token, createTask, vars)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if r.code() != "UNAVAILABLE" {
			first = r
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if first == nil {
		t.Fatalf("the retry never succeeds after Postgres came back:\n%s", in.stderr)
	}
	if replayed := first.Header.Get("Idempotent-Replayed") == "true"; first.code() != "" || replayed != (committed == 1) {
		t.Fatalf("the first successful retry: want the mutation run (or replayed when it committed: %d), got %s (replayed: %v)",
			committed, first, replayed)
	}
	id := first.field("createTask")["id"]
	replay := in.mustPost(t, token, createTask, vars)
	if replay.Header.Get("Idempotent-Replayed") != "true" || replay.field("createTask")["id"] != id {
		t.Errorf("second retry: want a replay of task %v, got %s", id, replay)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks WHERE title = $1`, title); n != 1 {
		t.Errorf("%d tasks titled %v after the retries, want 1", n, title)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != tasksBefore+1 {
		t.Errorf("%d tasks after the retries, want %d", n, tasksBefore+1)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_events WHERE action = 'task.created' AND entity_id = $1`, id); n != 1 {
		t.Errorf("%d task.created events for task %v, want 1", n, id)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_events`); n != eventsBefore+1 {
		t.Errorf("%d audit events after the retries, want %d", n, eventsBefore+1)
	}
	if n := count(t, pool, `SELECT count(*) FROM idempotency_keys`); n != keysBefore+1 {
		t.Errorf("%d idempotency records after the retries, want %d", n, keysBefore+1)
	}
	if code, body := in.healthz(t); code != 200 || body["status"] != "ok" {
		t.Errorf("/healthz after recovery: %d %v", code, body)
	}

	checkNoLeak(t, in, proxy, goroutinesBefore, maxConns, "the cut")
}
