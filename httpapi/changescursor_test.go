package httpapi_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/httpapi/apitest"
	"taskflow/reqinfo"
	"taskflow/store"
	"taskflow/store/storetest"
)

// boardQuery is the documented recipe's query: the cursor with the data.
const boardQuery = `query($p: ID!) { changesCursor project(id: $p) { tasks(first: 100) { nodes { id title } } } }`

// board is the answer of boardQuery.
type board struct {
	ChangesCursor string
	Project       struct {
		Tasks struct {
			Nodes []struct{ ID, Title string }
		}
	}
}

// ids returns the ids of the board's tasks.
func (b board) ids() []string {
	var out []string
	for _, n := range b.Project.Tasks.Nodes {
		out = append(out, n.ID)
	}
	return out
}

// readBoard runs boardQuery as u with extra headers (name, value...).
func (e *liveEnv) readBoard(t *testing.T, u apitest.User, headers ...string) board {
	t.Helper()
	res := e.Post(t, u.Token, boardQuery, map[string]any{"p": e.project}, headers...)
	var b board
	if len(res.Body.Errors) > 0 || json.Unmarshal(res.Body.Data, &b) != nil || b.ChangesCursor == "" {
		t.Fatalf("%s: %d %s", boardQuery, res.Status, res.Raw)
	}
	return b
}

// watchUntil subscribes u to the project's task changes from after, creates
// a last task once the subscription is open, and returns the ids of the
// tasks delivered before it, the last one included.
func (e *liveEnv) watchUntil(t *testing.T, u apitest.User, after string) []string {
	t.Helper()
	ws := e.dial(t, u)
	ws.Subscribe("1", taskChangesQuery, map[string]any{"p": e.project, "after": after})
	e.waitSubscribed(t, 1)
	last := e.createTask(t, "last")
	var got []string
	for {
		c := nextTaskChange(t, ws, "1")
		got = append(got, c.TaskID)
		if c.TaskID == last {
			return got
		}
	}
}

// holdTask creates a task as the owner in a unit of work that stays open,
// its transaction id taken, until the function returned is called; that
// commits it and returns the task's id.
func (e *liveEnv) holdTask(t *testing.T, title string) (commit func() string) {
	t.Helper()
	ready, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var id string
	go func() {
		done <- e.DB.UnitOfWork(context.Background(), func(ctx context.Context) error {
			task, err := e.DB.CreateTask(ctx, &store.User{ID: e.owner.ID}, store.NewTask{ProjectID: e.project, Title: title})
			if err != nil {
				return err
			}
			id = task.ID
			var xid string
			if err := store.TxFrom(ctx).QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
				return err
			}
			close(ready)
			<-release
			return nil
		})
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("held task: %v", err)
	}
	return func() string {
		t.Helper()
		once.Do(func() { close(release) })
		if err := <-done; err != nil {
			t.Fatalf("held task: %v", err)
		}
		return id
	}
}

// The documented recipe: query changesCursor with the data, then subscribe
// with after: it. A task created by a transaction open during the query (so
// not in its data) and committed after it, and one another client creates
// after the query, both come; what else comes was in the data (a harmless
// replay).
func TestChangesCursorRecipe(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t)
	before := e.createTask(t, "before")
	commitHeld := e.holdTask(t, "held")
	b := e.readBoard(t, e.member)
	if ids := b.ids(); !slices.Equal(ids, []string{before}) {
		t.Fatalf("board %v, want [%s] (the held task is not committed)", ids, before)
	}
	held := commitHeld()
	other := e.createTask(t, "other")
	got := e.watchUntil(t, e.member, b.ChangesCursor)
	for _, want := range []string{held, other} {
		if !slices.Contains(got, want) {
			t.Errorf("delivered %v: missing %s, which the board did not show", got, want)
		}
	}
	for _, id := range got[:len(got)-1] {
		if id != held && id != other && id != before {
			t.Errorf("delivered %s, which is none of the board's changes", id)
		}
	}
}

// The same over one WebSocket: the query on the connection, then the
// subscription from its cursor on the same connection.
func TestChangesCursorOverWebSocket(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t)
	ws := e.dial(t, e.member)
	ws.Subscribe("q", boardQuery, map[string]any{"p": e.project})
	m := ws.Next()
	var p struct {
		Data   board
		Errors []any
	}
	if m.Type != "next" || m.ID != "q" || json.Unmarshal(m.Payload, &p) != nil || len(p.Errors) > 0 || p.Data.ChangesCursor == "" {
		t.Fatalf("query over the WebSocket: %s %s %s", m.Type, m.ID, m.Payload)
	}
	if m := ws.Next(); m.Type != "complete" || m.ID != "q" {
		t.Fatalf("after the query's result: %s %s %s", m.Type, m.ID, m.Payload)
	}
	created := e.createTask(t, "created")
	ws.Subscribe("1", taskChangesQuery, map[string]any{"p": e.project, "after": p.Data.ChangesCursor})
	if c := nextTaskChange(t, ws, "1"); c.TaskID != created {
		t.Fatalf("first item %+v, want the task %s created after the query", c, created)
	}
}

// requestTracer is a pgx tracer of the statements of one request (by its
// X-Request-ID), batches as one statement: follow names the request and
// what to call as each of its statements starts and ends (each runs in the
// goroutine sending or reading the statement, so start may hold it).
type requestTracer struct {
	mu         sync.Mutex
	id         string
	log        []string
	start, end func(sql string)
}

// tracedSQL is the context key of the SQL of a statement a requestTracer
// follows, from its start to its end.
type tracedSQL struct{}

// follow starts following the request id, calling start and end (nil: none)
// for its statements, and forgets what it followed before.
func (r *requestTracer) follow(id string, start, end func(sql string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id, r.log, r.start, r.end = id, nil, start, end
}

// events returns what the request followed did: "start <sql>" and
// "end <sql>", in order, SQL on one line.
func (r *requestTracer) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *requestTracer) started(ctx context.Context, sql string) context.Context {
	r.mu.Lock()
	mine := r.id != "" && reqinfo.From(ctx).RequestID == r.id
	start := r.start
	if mine {
		r.log = append(r.log, "start "+strings.Join(strings.Fields(sql), " "))
	}
	r.mu.Unlock()
	if !mine {
		return ctx
	}
	if start != nil {
		start(sql)
	}
	return context.WithValue(ctx, tracedSQL{}, sql)
}

func (r *requestTracer) ended(ctx context.Context) {
	sql, ok := ctx.Value(tracedSQL{}).(string)
	if !ok {
		return
	}
	r.mu.Lock()
	r.log = append(r.log, "end "+strings.Join(strings.Fields(sql), " "))
	end := r.end
	r.mu.Unlock()
	if end != nil {
		end(sql)
	}
}

// TraceQueryStart follows a statement of the request.
func (r *requestTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return r.started(ctx, d.SQL)
}

// TraceQueryEnd follows its end.
func (r *requestTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	r.ended(ctx)
}

// TraceBatchStart follows a batch of the request as one statement.
func (r *requestTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	if d.Batch != nil {
		for _, q := range d.Batch.QueuedQueries {
			sqls = append(sqls, q.SQL)
		}
	}
	return r.started(ctx, strings.Join(sqls, "; "))
}

// TraceBatchQuery does nothing.
func (*requestTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd follows the batch's end.
func (r *requestTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	r.ended(ctx)
}

// isHeadRead reports whether sql reads the spine head (store.DB.SpineHead).
func isHeadRead(sql string) bool {
	return strings.Contains(sql, "pg_snapshot_xmin(pg_current_snapshot())")
}

// readsTasks reports whether sql reads tasks (and is not the head's read).
func readsTasks(sql string) bool { return !isHeadRead(sql) && strings.Contains(sql, "tasks") }

// newTracedLiveEnv is newLiveEnv on a pool that requestTracer traces.
func newTracedLiveEnv(t *testing.T) (*liveEnv, *requestTracer) {
	t.Helper()
	tr := &requestTracer{}
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), nil)
	return liveEnvOn(t, apitest.NewOn(t, db)), tr
}

// changesCursor is taken before the other fields of its operation read
// anything, however the server schedules them. The database plays the
// adversary: the head's read, when it starts, waits (up to a second) for a
// read of the board's tasks to start, then until that read has ended and a
// task created right after it has committed. Taken in that order, the head
// would be past that task, which is not in the board either: the
// subscription from the cursor would miss it. Taken first, as it is, it
// waits for nothing and the task comes.
func TestChangesCursorTakenBeforeTheData(t *testing.T) {
	t.Parallel()
	e, tr := newTracedLiveEnv(t)
	e.createTask(t, "before")
	dataStarted, injected := make(chan struct{}), make(chan struct{})
	var startOnce, injectOnce sync.Once
	var injectedID string
	var injectErr error
	req := "changes-cursor-" + uuid.NewString()
	tr.follow(req, func(sql string) {
		switch {
		case isHeadRead(sql):
			select {
			case <-dataStarted:
				select {
				case <-injected:
				case <-time.After(30 * time.Second):
				}
			case <-time.After(time.Second):
			}
		case readsTasks(sql):
			startOnce.Do(func() { close(dataStarted) })
		}
	}, func(sql string) {
		if !readsTasks(sql) {
			return
		}
		injectOnce.Do(func() {
			defer close(injected)
			task, err := e.DB.CreateTask(context.Background(), &store.User{ID: e.owner.ID},
				store.NewTask{ProjectID: e.project, Title: "between"})
			if err != nil {
				injectErr = err
				return
			}
			injectedID = task.ID
		})
	})
	b := e.readBoard(t, e.member, "X-Request-ID", req)
	events := tr.events()
	tr.follow("", nil, nil)
	select {
	case <-injected:
	default:
		t.Fatalf("the board's tasks were never read: %q", events)
	}
	if injectErr != nil {
		t.Fatal(injectErr)
	}
	if slices.Contains(b.ids(), injectedID) {
		t.Fatalf("the board shows %s, created after its read: %q", injectedID, events)
	}
	if got := e.watchUntil(t, e.member, b.ChangesCursor); !slices.Contains(got, injectedID) {
		t.Fatalf("the subscription from changesCursor delivered %v: it missed %s, committed after the board's read "+
			"(statements: %q)", got, injectedID, events)
	}
}

// An operation reads the spine head only when it selects changesCursor at
// its root (in a fragment, under an alias too, not skipped) for a signed-in
// caller: once, in a statement that ends before any of the fields' starts.
// Without the field, with it skipped, and for an anonymous caller (who gets
// UNAUTHENTICATED) nothing more is read. The field costs 1.
func TestChangesCursorStatements(t *testing.T) {
	t.Parallel()
	e, tr := newTracedLiveEnv(t)
	e.createTask(t, "a task")
	run := func(token, query string) ([]string, *apitest.Response) {
		t.Helper()
		var vars map[string]any
		if strings.Contains(query, "$p") {
			vars = map[string]any{"p": e.project}
		}
		req := "statements-" + uuid.NewString()
		tr.follow(req, nil, nil)
		res := e.Post(t, token, query, vars, "X-Request-ID", req)
		events := tr.events()
		tr.follow("", nil, nil)
		return events, res
	}
	const data = `project(id: $p) { name tasks(first: 10) { nodes { id title } } }`
	run(e.member.Token, `query($p: ID!) { `+data+` }`) // the token read, remembered
	without, res := run(e.member.Token, `query($p: ID!) { `+data+` }`)
	if len(res.Body.Errors) > 0 {
		t.Fatalf("without the field: %s", res.Raw)
	}
	_, res = run(e.member.Token, `{ changesCursor }`)
	if cost, _ := res.Body.Extensions["cost"].(map[string]any); cost["requestedQueryCost"] != 1.0 {
		t.Errorf("{ changesCursor } costs %v, want 1: %s", cost["requestedQueryCost"], res.Raw)
	}
	for _, c := range []struct {
		name, token, query string
		heads              int
	}{
		{"without the field", e.member.Token, `query($p: ID!) { ` + data + ` }`, 0},
		{"with the field", e.member.Token, `query($p: ID!) { ` + data + ` changesCursor }`, 1},
		{"aliased in a fragment", e.member.Token,
			`query($p: ID!) { ...F ` + data + ` } fragment F on Query { c: changesCursor changesCursor }`, 1},
		{"skipped", e.member.Token, `query($p: ID!) { ` + data + ` changesCursor @skip(if: true) }`, 0},
		{"anonymous", "", `{ changesCursor }`, 0},
	} {
		events, res := run(c.token, c.query)
		var heads []int
		firstData := -1
		for i, ev := range events {
			if isHeadRead(ev) && strings.HasPrefix(ev, "start ") {
				heads = append(heads, i)
			}
			if firstData < 0 && strings.HasPrefix(ev, "start ") && !isHeadRead(ev) && strings.Contains(ev, "projects") {
				firstData = i
			}
		}
		if len(heads) != c.heads {
			t.Errorf("%s: %d reads of the head, want %d: %q", c.name, len(heads), c.heads, events)
			continue
		}
		if c.token == "" {
			if res.Code() != "UNAUTHENTICATED" || string(res.Body.Data) != "null" {
				t.Errorf("%s: %d %s, want UNAUTHENTICATED", c.name, res.Status, res.Raw)
			}
			continue
		}
		if len(res.Body.Errors) > 0 {
			t.Errorf("%s: %s", c.name, res.Raw)
			continue
		}
		if want := len(without)/2 + c.heads; len(events)/2 != want {
			t.Errorf("%s: %d statements, want %d (%d without the field): %q", c.name, len(events)/2, want,
				len(without)/2, events)
		}
		if c.heads == 0 {
			continue
		}
		if end := slices.Index(events, "end "+strings.TrimPrefix(events[heads[0]], "start ")); end < 0 || firstData < end {
			t.Errorf("%s: the head's read did not end before the fields' reads: %q", c.name, events)
		}
		var d map[string]any
		_ = json.Unmarshal(res.Body.Data, &d)
		for k, v := range d {
			if k == "project" {
				continue
			}
			if s, _ := v.(string); s == "" {
				t.Errorf("%s: %s = %v, want a cursor", c.name, k, v)
			} else if _, err := store.ParseSpineCursor(s); err != nil {
				t.Errorf("%s: %s = %q: %v", c.name, k, s, err)
			}
		}
	}
}
