package live_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/live"
	"taskflow/store"
	"taskflow/store/storetest"
)

// env is a database with a user (and a token), a workspace and a project,
// and a hub whose tailer runs until the test ends.
type env struct {
	db      *store.DB
	hub     *live.Hub
	user    *store.User
	token   []byte
	ws      string
	project string
}

func setup(t *testing.T, o live.Options) *env {
	t.Helper()
	e := setupUnrun(t, o)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.hub.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// setupUnrun is setup with a hub nobody runs yet.
func setupUnrun(t *testing.T, o live.Options) *env {
	t.Helper()
	db := storetest.DB(t)
	ctx := t.Context()
	e := &env{db: db, user: &store.User{}}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('a@example.com', 'A', 'x') RETURNING id`).
		Scan(&e.user.ID); err != nil {
		t.Fatal(err)
	}
	e.token = auth.HashToken(auth.NewToken())
	if _, err := db.Pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 day')`,
		e.token, e.user.ID); err != nil {
		t.Fatal(err)
	}
	ws, err := db.CreateWorkspace(ctx, e.user, "W")
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, e.user, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.ws, e.project = ws.ID, p.ID
	o.DB, o.Log = db, slog.New(slog.NewTextHandler(io.Discard, nil))
	e.hub = live.New(o)
	return e
}

// subscribe starts a taskChanges subscription from after; its events come
// on the channel, why it ended in the End.
func (e *env) subscribe(t *testing.T, ctx context.Context, after string) (<-chan *live.Event, *live.End) {
	t.Helper()
	ctx, end := live.WithEnd(ctx)
	ch, err := live.Subscribe(ctx, e.hub, live.Spec{Kind: live.TaskChanges, User: e.user, TokenHash: e.token,
		ProjectID: e.project, After: after}, func(ev *live.Event) *live.Event { return ev })
	if err != nil {
		t.Fatal(err)
	}
	return ch, end
}

// createTask creates a task in its own unit of work, which sleeps before it
// commits (so that commits overtake each other) and rolls back when
// rollback is set; it returns the task's id when it committed.
func (e *env) createTask(ctx context.Context, title string, hold time.Duration, rollback bool) (string, error) {
	var id string
	errRollback := errors.New("rollback")
	err := e.db.UnitOfWork(ctx, func(ctx context.Context) error {
		t, err := e.db.CreateTask(ctx, e.user, store.NewTask{ProjectID: e.project, Title: title})
		if err != nil {
			return err
		}
		id = t.ID
		time.Sleep(hold)
		if rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		return "", nil
	}
	return id, err
}

// spineTasks lists the committed task.created events of the workspace after
// from, in spine order: what a subscriber from there must get.
func (e *env) spineTasks(t *testing.T, from store.SpineCursor) []string {
	t.Helper()
	var out []string
	for {
		r, err := e.db.ReadSpine(t.Context(), from, store.SpineFilter{ChainKeys: []string{e.ws}, Actions: []string{"task.created"}}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Events {
			out = append(out, ev.Record.EntityID)
		}
		from = r.Next
		if len(r.Events) < 1000 {
			return out
		}
	}
}

// A client that reads a few events, goes away and comes back with the
// cursor of the last one it got, again and again, while six writers commit
// (and roll back) task creations whose commits overtake each other, gets
// every committed task once, in spine order, and no rolled-back one.
func TestResumeNoGapNoDuplicateUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{Poll: 20 * time.Millisecond})
	ctx := t.Context()
	start, err := e.db.SpineHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := 0
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				hold := time.Duration(rand.IntN(15)) * time.Millisecond
				id, err := e.createTask(ctx, fmt.Sprintf("w%d-%d", w, i), hold, i%7 == 3)
				if err != nil {
					t.Error(err)
					return
				}
				if id != "" {
					mu.Lock()
					committed++
					mu.Unlock()
				}
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()

	var got []string
	cursor := start.String()
	seen := map[string]bool{}
	take := func(ev *live.Event, session int) {
		if seen[ev.Record.EntityID] {
			t.Fatalf("task %s delivered twice (session %d)", ev.Record.EntityID, session)
		}
		seen[ev.Record.EntityID] = true
		got = append(got, ev.Record.EntityID)
		cursor = ev.Cursor.String()
	}
	sessions := 0
	for done := false; !done; sessions++ {
		sub, cancel := context.WithCancel(ctx)
		ch, end := e.subscribe(t, sub, cursor)
		for n := rand.IntN(12) + 1; n > 0 && !done; n-- {
			select {
			case ev := <-ch:
				take(ev, sessions)
			case <-writersDone:
				done = true
			}
		}
		cancel()
		for range ch { // the stream closes once the client went away
		}
		if err := end.Err(); err != nil {
			t.Fatalf("session %d ended with %v", sessions, err)
		}
	}
	// The last session: everything committed is in the spine by now.
	ch, _ := e.subscribe(t, ctx, cursor)
	mu.Lock()
	n := committed
	mu.Unlock()
	for len(got) < n {
		select {
		case ev := <-ch:
			take(ev, sessions)
		case <-time.After(15 * time.Second): // a guard against hanging, not a timing assertion
			t.Fatalf("got %d of %d committed tasks", len(got), n)
		}
	}
	if want := e.spineTasks(t, start); !slices.Equal(got, want) {
		t.Fatalf("got %d tasks in another order or with others than the spine's %d", len(got), len(want))
	}
	t.Logf("%d tasks in %d sessions", len(got), sessions+1)
}

// A subscriber whose catch-up takes more than one read (a backlog over the
// read's size, read slowly) while new events commit: the tailer queues the
// new events for it, its next catch-up read finds them too, and each is
// delivered once, in order.
func TestCatchUpOverlappingTheTailer(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{Poll: 10 * time.Millisecond})
	ctx := t.Context()
	start, err := e.db.SpineHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		if _, err := e.createTask(ctx, fmt.Sprint("backlog ", i), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	ch, end := e.subscribe(t, ctx, start.String())
	var got []string
	got = append(got, (<-ch).Record.EntityID)
	for i := range 20 {
		if _, err := e.createTask(ctx, fmt.Sprint("live ", i), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // lets the tailer queue them (the test holds either way)
	for len(got) < 270 {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("ended with %v after %d", end.Err(), len(got))
			}
			got = append(got, ev.Record.EntityID)
		case <-time.After(15 * time.Second): // a guard against hanging
			t.Fatalf("got %d of 270", len(got))
		}
	}
	select {
	case ev := <-ch:
		t.Fatalf("an event more: %s", ev.Record.EntityID)
	case <-time.After(200 * time.Millisecond):
	}
	if want := e.spineTasks(t, start); !slices.Equal(got, want) {
		t.Fatalf("got %d tasks, not the spine's %d in order", len(got), len(want))
	}
}

// A client that stops reading while events keep coming holds no more than
// its queue: the tailer drops what does not fit, and the subscription reads
// it from the log when the client reads again. Every event comes, once, in
// order, and the stream does not end.
func TestSlowConsumerFallsBackToTheLog(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{Buffer: 2})
	ctx := t.Context()
	ch, end := e.subscribe(t, ctx, "")
	var ids []string
	for i := range 30 {
		id, err := e.createTask(ctx, fmt.Sprint(i), 0, false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	time.Sleep(300 * time.Millisecond) // lets the tailer overflow the queue (the test holds either way)
	var got []string
	for len(got) < len(ids) {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended with %v after %d events", end.Err(), len(got))
			}
			got = append(got, ev.Record.EntityID)
		case <-time.After(15 * time.Second): // a guard against hanging
			t.Fatalf("got %d of %d", len(got), len(ids))
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("got %v, want %v", got, ids)
	}
}

// Each delivered event is charged; an event the budget cannot pay ends the
// stream with the charge's error, not delivered.
func TestEventsAreCharged(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{})
	ctx := t.Context()
	paid := 0
	ctx = live.WithCharge(ctx, func(context.Context) *errs.Error {
		if paid == 2 {
			return &errs.Error{Code: errs.CodeRateLimited, Message: "over", Extensions: map[string]any{"retryAfter": 3}}
		}
		paid++
		return nil
	})
	ch, end := e.subscribe(t, ctx, "")
	for i := range 3 {
		if _, err := e.createTask(ctx, fmt.Sprint(i), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range ch {
		n++
	}
	if err := end.Err(); n != 2 || err == nil || err.Code != errs.CodeRateLimited || err.Extensions["retryAfter"] != 3 {
		t.Fatalf("%d events, then %v", n, err)
	}
}

// A cursor from the future, or not made by this API, is BAD_USER_INPUT at
// subscribe time.
func TestBadCursorIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{})
	future := store.SpineCursor{TxID: 1 << 60, Seq: 1}.String()
	for _, after := range []string{future, "not-a-cursor"} {
		_, err := live.Subscribe(t.Context(), e.hub, live.Spec{Kind: live.TaskChanges, User: e.user, TokenHash: e.token,
			ProjectID: e.project, After: after}, func(ev *live.Event) *live.Event { return ev })
		if errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("after %q: %v", after, err)
		}
	}
}

// A hub a subscriber started before anyone ran it has one tailer: Run,
// called after, lets that one go on (events still come, once) and stops it
// when its context ends. Run used to start a second tailer, whose close of
// the hub's ready channel panicked the process (seen in CI, live/hub.go:183).
func TestRunAfterASubscriberStartedTheTailer(t *testing.T) {
	t.Parallel()
	e := setupUnrun(t, live.Options{Poll: 20 * time.Millisecond})
	ctx := t.Context()
	ch, _ := e.subscribe(t, ctx, "") // starts the hub's own tailer
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.hub.Run(runCtx) }()
	for i := range 3 {
		id, err := e.createTask(ctx, fmt.Sprintf("task %d", i), 0, false)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-ch:
			if ev.Record.EntityID != id {
				t.Fatalf("event of %s, want %s", ev.Record.EntityID, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for task %d", i)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Two Runs of a hub nobody else started: whichever comes first runs the
// tailer until its context ends, the other waits for its own context; both
// return when their contexts end, in either order of start.
func TestTwoRunsReturnWithTheirContexts(t *testing.T) {
	t.Parallel()
	e := setupUnrun(t, live.Options{Poll: 20 * time.Millisecond})
	var runs []chan struct{}
	var cancels []context.CancelFunc
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); e.hub.Run(ctx) }()
		runs, cancels = append(runs, done), append(cancels, cancel)
	}
	for i, cancel := range cancels {
		cancel()
		select {
		case <-runs[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("Run %d did not return after its context ended", i)
		}
	}
}
