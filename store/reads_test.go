package store_test

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
	"taskflow/store/storetest"
)

// batchSizes is a pgx tracer that records the statements of every batch sent.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (*batchSizes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (*batchSizes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (b *batchSizes) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(d.Batch.QueuedQueries))
	return ctx
}
func (*batchSizes) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*batchSizes) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns the sizes recorded since the last take.
func (b *batchSizes) take() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sizes
	b.sizes = nil
	return s
}

// readsBundle is a store whose batches are recorded, with one read batch in
// flight at most, and a way to hold that batch.
type readsBundle struct {
	db      *store.DB
	batches *batchSizes
}

func setupReads(t *testing.T) *readsBundle {
	t.Helper()
	b := &readsBundle{batches: &batchSizes{}}
	b.db = store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = b.batches }), nil)
	b.db.SetReadBatches(1)
	return b
}

// hold sends a read that waits for an advisory lock the test holds, so that
// the reads made next wait for the one batch in flight; release lets it go
// once want reads wait, and returns when the held read is done.
func (b *readsBundle) hold(t *testing.T) (release func(want int)) {
	t.Helper()
	ctx := t.Context()
	conn, err := b.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(conn.Release) })
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(7)`); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		held <- b.db.Read(context.Background(), func(b *pgx.Batch) {
			b.Queue(`SELECT pg_advisory_xact_lock_shared(7)`)
		}, func(br pgx.BatchResults) error { _, err := br.Exec(); return err })
	}()
	waitFor(t, "the held read to wait for the lock", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND objid = 7 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
		return err == nil && n == 1
	})
	return func(want int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d reads to wait", want), func() bool { return b.db.ReadStats().Waiting == want })
		_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(7)`)
		once.Do(conn.Release)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-held; err != nil {
			t.Fatalf("held read: %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
	}
}

// Reads of tasks and of project pages made while a batch is in flight wait,
// and then go to Postgres in one round trip; each gets what it gets alone:
// its own task or page, its own NOT_FOUND, a stranger's nil project.
func TestConcurrentReadsShareOneRoundTrip(t *testing.T) {
	t.Parallel()
	b := setupReads(t)
	f := &taskFixture{db: b.db}
	seedTaskFixture(t, f)
	ctx := t.Context()
	var tasks []string
	for i := range 4 {
		task, err := b.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: fmt.Sprintf("t%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := b.db.Pool.Exec(ctx, `UPDATE tasks SET assignee_id = $1 WHERE id = $2`, f.member.ID, task.ID); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.db.Pool.Exec(ctx, `INSERT INTO comments (workspace_id, task_id, author_id, body) VALUES ($1, $2, $3, 'c')`,
			f.workspace, task.ID, f.member.ID); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task.ID)
	}
	stranger := &store.User{}
	if err := b.db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('s@example.com', 'S', 'x')
		RETURNING id`).Scan(&stranger.ID); err != nil {
		t.Fatal(err)
	}
	also := store.TaskPageAlso{Assignees: true, Comments: &store.CommentsAlso{First: 2, Authors: true}}
	first := 3
	key := store.TaskPageKey{ProjectID: f.project, First: first}
	var reads []func() readAnswer
	for _, id := range append(tasks, "00000000-0000-4000-8000-000000000000") {
		for _, viewer := range []*store.User{f.member, stranger} {
			reads = append(reads, func() readAnswer {
				task, assignee, err := b.db.TaskWithAssignee(context.Background(), viewer, id)
				return readAnswer{Task: task, Assignee: assignee, Err: fmt.Sprint(err)}
			})
		}
	}
	for _, viewer := range []*store.User{f.member, stranger, f.member} {
		reads = append(reads, func() readAnswer {
			p, page, extras, err := b.db.ProjectWithTaskPage(context.Background(), viewer.ID, key, also)
			return readAnswer{Project: p, Page: page, Extras: extras, Err: fmt.Sprint(err)}
		})
	}
	alone := make([]readAnswer, len(reads))
	for i, read := range reads {
		alone[i] = read()
	}
	if alone[0].Task == nil || alone[0].Assignee == nil || alone[1].Err == "<nil>" || alone[len(reads)-3].Page == nil ||
		len(alone[len(reads)-3].Extras.Comments) == 0 || alone[len(reads)-2].Project != nil {
		t.Fatalf("the fixture's answers are not what the test needs: %+v", alone)
	}
	b.batches.take()

	release := b.hold(t)
	together := make([]readAnswer, len(reads))
	var wg sync.WaitGroup
	for i, read := range reads {
		wg.Go(func() { together[i] = read() })
	}
	release(len(reads))
	wg.Wait()
	for i := range reads {
		if g, w := together[i].String(), alone[i].String(); g != w {
			t.Errorf("read %d together: %s\nalone: %s", i, g, w)
		}
	}
	if got, want := b.db.ReadStats(), (store.ReadStats{Alone: uint64(len(reads)) + 1, Together: uint64(len(reads)), Batches: 1}); got != want {
		t.Errorf("ReadStats: %+v, want %+v", got, want)
	}
	// The held read, then every read's statements in one batch: 1 for a
	// task, 4 for a page with assignees and comments.
	if got, want := b.batches.take(), []int{1, 2*5*1 + 3*4}; !slices.Equal(got, want) {
		t.Errorf("batches sent (statements): %v, want %v", got, want)
	}
}

// readAnswer is what a read of TestConcurrentReadsShareOneRoundTrip got.
type readAnswer struct {
	Task     *store.Task
	Assignee *store.User
	Project  *store.Project
	Page     *store.TaskConnection
	Extras   *store.TaskPageExtras `json:"-"`
	Err      string
}

// String writes the answer as JSON, the extras' comment pages by task.
func (a readAnswer) String() string {
	var comments map[string]*store.CommentConnection
	var users map[string]*store.User
	if a.Extras != nil {
		users, comments = a.Extras.Users, map[string]*store.CommentConnection{}
		for k, c := range a.Extras.Comments {
			comments[fmt.Sprintf("%+v", k)] = c
		}
	}
	b, err := json.Marshal(struct {
		readAnswer
		Users    map[string]*store.User
		Comments map[string]*store.CommentConnection
	}{a, users, comments})
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// seedTaskFixture makes, on f.db, a workspace with a MEMBER and a project.
func seedTaskFixture(t *testing.T, f *taskFixture) {
	t.Helper()
	ctx := t.Context()
	f.member = &store.User{}
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('m@example.com', 'M', 'x')
		RETURNING id, email, name`).Scan(&f.member.ID, &f.member.Email, &f.member.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('W') RETURNING id`).Scan(&f.workspace); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`,
		f.workspace, f.member.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'P') RETURNING id`,
		f.workspace).Scan(&f.project); err != nil {
		t.Fatal(err)
	}
}

// A statement that fails in a batch fails every later one in pgx; each read
// still gets its own answer: the one that failed its error, those before it
// theirs, those after it are sent again alone. A read that leaves statements
// unread does not shift the next read's; a read that panics, reading or
// queuing its statements, panics in its own request, not in the one that led
// the batch.
func TestBatchedReadsFailAlone(t *testing.T) {
	t.Parallel()
	b := setupReads(t)
	type result struct {
		values []int
		err    error
		panic  any
	}
	reads := []struct {
		name string
		sql  []string
		read int // statements read, of sql; -1: the read function panics, -2: the queue function
		want result
	}{
		{name: "before", sql: []string{`SELECT 1`}, read: 1, want: result{values: []int{1}}},
		{name: "panics", sql: []string{`SELECT 6`}, read: -1, want: result{panic: "boom"}},
		{name: "panics queuing", sql: []string{`SELECT 12`}, read: -2, want: result{panic: "boom"}},
		{name: "leaves one unread", sql: []string{`SELECT 4`, `SELECT 5`}, read: 1, want: result{values: []int{4}}},
		{name: "fails after rows", sql: []string{`SELECT 10 / (2 - g) FROM generate_series(0, 3) g`}, read: 1,
			want: result{values: []int{5, 10}, err: &pgconn.PgError{Code: "22012"}}},
		{name: "after", sql: []string{`SELECT 2`, `SELECT 3`}, read: 2, want: result{values: []int{2, 3}}},
		{name: "fails too", sql: []string{`SELECT 7`, `SELECT ('x' || (random() * 0)::int)::int`}, read: 2, want: result{values: []int{7}, err: &pgconn.PgError{Code: "22P02"}}},
		{name: "last", sql: []string{`SELECT 8`}, read: 1, want: result{values: []int{8}}},
	}
	got := make([]result, len(reads))
	release := b.hold(t)
	var wg sync.WaitGroup
	for i, r := range reads {
		wg.Go(func() {
			defer func() { got[i].panic = recover() }()
			got[i].err = b.db.Read(context.Background(), func(b *pgx.Batch) {
				for _, sql := range r.sql {
					b.Queue(sql)
					if r.read == -2 {
						panic("boom while queuing") // its statement queued, to be dropped
					}
				}
			}, func(br pgx.BatchResults) error {
				var values []int
				defer func() { got[i].values = values }()
				if r.read < 0 {
					panic("boom")
				}
				for range r.read {
					rows, err := br.Query()
					if err != nil {
						return err
					}
					for rows.Next() {
						var v int
						if err := rows.Scan(&v); err != nil {
							return err
						}
						values = append(values, v)
					}
					if err := rows.Err(); err != nil {
						return err
					}
				}
				return nil
			})
		})
		// In this order in the batch.
		waitFor(t, r.name+" to wait", func() bool { return b.db.ReadStats().Waiting == i+1 })
	}
	release(len(reads))
	wg.Wait()
	for i, r := range reads {
		g := got[i]
		var pgErr *pgconn.PgError
		switch {
		case r.want.panic != nil:
			if !strings.Contains(fmt.Sprint(g.panic), "boom") || g.err != nil {
				t.Errorf("%s: panic %v, error %v; want its own panic", r.name, g.panic, g.err)
			}
		case g.panic != nil:
			t.Errorf("%s: panicked: %v", r.name, g.panic)
		case r.want.err != nil:
			if !errors.As(g.err, &pgErr) || pgErr.Code != r.want.err.(*pgconn.PgError).Code {
				t.Errorf("%s: error %v, want its own SQLSTATE %s", r.name, g.err, r.want.err.(*pgconn.PgError).Code)
			}
		case g.err != nil:
			t.Errorf("%s: error %v", r.name, g.err)
		}
		if !slices.Equal(g.values, r.want.values) {
			t.Errorf("%s: read %v, want %v", r.name, g.values, r.want.values)
		}
	}
	// The held read; all eight together (10 statements: the one that panics
	// queuing sends none); then, alone, those after the failure: "after",
	// "fails too" and "last".
	sizes := b.batches.take()
	if len(sizes) != 5 || sizes[0] != 1 || sizes[1] != 10 || !slices.Equal(slices.Sorted(slices.Values(sizes[2:])), []int{1, 2, 2}) {
		t.Errorf("batches sent (statements): %v, want [1 10] and then 1, 2 and 2 in any order", sizes)
	}
	// Alone: the held read. Sent again: "after", "fails too" and "last".
	if got, want := b.db.ReadStats(), (store.ReadStats{Alone: 1, Together: 8, Batches: 1, Again: 3}); got != want {
		t.Errorf("ReadStats: %+v, want %+v", got, want)
	}
	// The batcher is free again.
	var v int
	if err := b.db.Read(t.Context(), func(b *pgx.Batch) { b.Queue(`SELECT 9`) },
		func(br pgx.BatchResults) error { return br.QueryRow().Scan(&v) }); err != nil || v != 9 {
		t.Fatalf("read after the batch: %d, %v", v, err)
	}
}

// A read in a unit of work goes in its transaction and sees its writes;
// with DATABASE_READ_BATCHES=0 every read goes alone.
func TestReadsInAUnitOfWorkAndOff(t *testing.T) {
	t.Parallel()
	b := setupReads(t)
	f := &taskFixture{db: b.db}
	seedTaskFixture(t, f)
	task, err := b.db.CreateTask(t.Context(), f.member, store.NewTask{ProjectID: f.project, Title: "before"})
	if err != nil {
		t.Fatal(err)
	}
	err = b.db.UnitOfWork(t.Context(), func(ctx context.Context) error {
		if _, err := store.TxFrom(ctx).Exec(ctx, `UPDATE tasks SET title = 'in the unit' WHERE id = $1`, task.ID); err != nil {
			return err
		}
		got, _, err := b.db.TaskWithAssignee(ctx, f.member, task.ID)
		if err == nil && got.Title != "in the unit" {
			err = fmt.Errorf("read in the unit of work: %q", got.Title)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	b.db.SetReadBatches(0)
	b.batches.take()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := b.db.TaskWithAssignee(context.Background(), f.member, task.ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := b.batches.take(); !slices.Equal(got, []int{1, 1, 1, 1, 1, 1, 1, 1}) {
		t.Errorf("batches sent with batching off: %v, want eight of one statement", got)
	}
}

// A read that returns without reading a statement of its own that fails gets
// that failure as its error when sent alone (sendRead returns the batch's
// Close error), but nil when coalesced (skip notes the failure and drops it).
// The decision promises each read "the answer or error it would have got
// alone".
func TestBatchedReadLeavingAFailingStatementUnreadFailsAsAlone(t *testing.T) {
	t.Parallel()
	b := setupReads(t)
	queue := func(b *pgx.Batch) {
		b.Queue(`SELECT 1`)
		b.Queue(`SELECT 1 / (random() * 0)::int`)
	}
	read := func(v *int) func(br pgx.BatchResults) error {
		return func(br pgx.BatchResults) error { return br.QueryRow().Scan(v) } // the second left unread
	}
	var v int
	alone := b.db.Read(t.Context(), queue, read(&v))
	if alone == nil {
		t.Fatal("alone: no error; the test needs the unread statement's failure")
	}
	errs := make([]error, 2)
	release := b.hold(t)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			var v int
			errs[i] = b.db.Read(context.Background(), queue, read(&v))
		})
		waitFor(t, "reads to wait", func() bool { return b.db.ReadStats().Waiting == i+1 })
	}
	release(len(errs))
	wg.Wait()
	for i, err := range errs {
		if fmt.Sprint(err) != fmt.Sprint(alone) {
			t.Errorf("read %d together: error %v; alone: %v", i, err, alone)
		}
	}
}

// A read waiting for a shared round trip stops waiting when its own context
// ends (a request's REQUEST_TIMEOUT), with its context's error, while the
// round trip goes on for the others, which get their answers: a read still
// queued, and reads inside a batch in flight, stuck behind another's
// statement (the batch's first read, which led it, and one after it).
func TestBatchedReadsStopAtTheirOwnDeadline(t *testing.T) {
	t.Parallel()
	b := setupReads(t)
	ctx := t.Context()
	selectOne := func(ctx context.Context, sql string) (int, error) {
		var v int
		err := b.db.Read(ctx, func(b *pgx.Batch) { b.Queue(sql) },
			func(br pgx.BatchResults) error { return br.QueryRow().Scan(&v) })
		return v, err
	}
	type answer struct {
		v   int
		err error
	}
	start := func(ctx context.Context, sql string) chan answer {
		c := make(chan answer, 1)
		go func() { v, err := selectOne(ctx, sql); c <- answer{v, err} }()
		return c
	}
	wait := func(what string, c chan answer) answer {
		t.Helper()
		select {
		case a := <-c:
			return a
		case <-time.After(20 * time.Second):
			t.Fatalf("waited 20s for %s", what)
			return answer{}
		}
	}
	canceled := func(what string, a answer) {
		t.Helper()
		if !errors.Is(a.err, context.Canceled) || !store.Canceled(a.err) {
			t.Errorf("%s: %v %v, want its context's cancellation", what, a.v, a.err)
		}
	}

	// Queued behind the one batch in flight.
	release := b.hold(t)
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	queued := start(queuedCtx, `SELECT 1`)
	other := start(context.Background(), `SELECT 2`)
	waitFor(t, "2 reads to wait", func() bool { return b.db.ReadStats().Waiting == 2 })
	cancelQueued()
	canceled("a queued read", wait("the queued read to stop", queued))
	if w := b.db.ReadStats().Waiting; w != 1 {
		t.Errorf("%d reads wait after one stopped, want 1", w)
	}
	release(1)
	if a := wait("the other queued read", other); a.v != 2 || a.err != nil {
		t.Errorf("the other queued read: %v %v, want 2", a.v, a.err)
	}

	// In a batch in flight, behind its first read's statement, which waits
	// on a lock the test holds.
	conn, err := b.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(8)`); err != nil {
		t.Fatal(err)
	}
	release = b.hold(t)
	leadCtx, cancelLead := context.WithCancel(ctx)
	lead := start(leadCtx, `SELECT 3 FROM (SELECT pg_advisory_xact_lock_shared(8)) l`)
	waitFor(t, "the first read to wait", func() bool { return b.db.ReadStats().Waiting == 1 })
	behindCtx, cancelBehind := context.WithCancel(ctx)
	behind := start(behindCtx, `SELECT 4`)
	waitFor(t, "the second read to wait", func() bool { return b.db.ReadStats().Waiting == 2 })
	last := start(context.Background(), `SELECT 5`)
	release(3)
	waitFor(t, "the batch to wait for the lock", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND objid = 8 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
		return err == nil && n == 1
	})
	cancelLead()
	canceled("the batch's first read", wait("the batch's first read to stop", lead))
	cancelBehind()
	canceled("a read behind it", wait("the read behind it to stop", behind))
	select {
	case a := <-last:
		t.Fatalf("the last read of the batch answered %v %v while its batch waits", a.v, a.err)
	default:
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(8)`); err != nil {
		t.Fatal(err)
	}
	if a := wait("the batch's last read", last); a.v != 5 || a.err != nil {
		t.Errorf("the batch's last read: %v %v, want 5", a.v, a.err)
	}
	// The batcher goes on: a read now goes at once.
	if v, err := selectOne(ctx, `SELECT 6`); v != 6 || err != nil {
		t.Errorf("a read after: %v %v", v, err)
	}
}

// panicValue is an argument whose encoding panics.
type panicValue struct{}

// Value panics, as a buggy argument type may while pgx encodes a batch.
func (panicValue) Value() (driver.Value, error) { panic("boom encoding") }

// A panic while a shared round trip is sent (pgx encoding a read's
// argument), outside the reads' own functions, does not end the process
// (the batch runs on a goroutine of its own): the reads are sent again
// alone, and the read that caused it panics in its own request, the others
// get their answers.
func TestBatchPanicIsTheCulpritsAlone(t *testing.T) {
	t.Parallel()
	b := setupReads(t)
	type result struct {
		v     int
		err   error
		panic any
	}
	args := []any{1, panicValue{}, 3}
	got := make([]result, len(args))
	release := b.hold(t)
	var wg sync.WaitGroup
	for i, arg := range args {
		wg.Go(func() {
			defer func() { got[i].panic = recover() }()
			got[i].err = b.db.Read(context.Background(), func(b *pgx.Batch) { b.Queue(`SELECT $1::int`, arg) },
				func(br pgx.BatchResults) error { return br.QueryRow().Scan(&got[i].v) })
		})
		waitFor(t, fmt.Sprintf("%d reads to wait", i+1), func() bool { return b.db.ReadStats().Waiting == i+1 })
	}
	release(len(args))
	wg.Wait()
	if got[0].v != 1 || got[0].err != nil || got[0].panic != nil || got[2].v != 3 || got[2].err != nil || got[2].panic != nil {
		t.Errorf("the other reads: %+v, %+v, want 1 and 3", got[0], got[2])
	}
	// Its panic, or what pgx's batch tracer makes of it (a type assertion of
	// the batch's results, nil after the panic).
	if got[1].panic == nil {
		t.Errorf("the read whose argument panics: %+v, want its panic", got[1])
	}
	// Every connection was released: the pool closes at the test's end.
}
