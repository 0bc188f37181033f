package store_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Found in review (2026-12-04): the server's own database role may delete
// the webhook dispatcher's cursor (row 1 of webhook_dispatch_cursor, made by
// migration 0011). Then the dispatcher's look for waiting events found none,
// for ever: no delivery was made, nothing logged, and its backlog read 0, as
// if all were well. Now a round fails with ErrDispatchCursorMissing (logged
// at ERROR by Run at every retry), the backlog is that error too, the cursor
// is not made again (at the start of the spine it would enqueue delivered
// events again), and restored as docs/operations.md says, the dispatcher
// goes on: the waiting event is delivered, none twice.
func TestDispatcherReportsAMissingCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newHookFixture(t)
	ep := f.endpoint(t, "task.*")
	p, err := f.db.CreateProject(ctx, f.member, f.workspace, "Q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"a", "b"} {
		if _, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: p.ID, Title: title}); err != nil {
			t.Fatal(err)
		}
	}
	storetest.DispatchAll(t, f.db)
	// An event of no endpoint's after the newest delivery: the restored
	// cursor reads it again, and it gets no delivery then either.
	if _, err := f.db.CreateProject(ctx, f.member, f.workspace, "R", nil); err != nil {
		t.Fatal(err)
	}
	storetest.DispatchAll(t, f.db)
	if _, err := f.db.Pool.Exec(ctx, `DELETE FROM webhook_dispatch_cursor`); err != nil {
		t.Fatal(err)
	}
	d := &store.WebhookDispatcher{DB: f.db}
	if r, err := d.Round(ctx); !errors.Is(err, store.ErrDispatchCursorMissing) {
		t.Errorf("round without a cursor, nothing waiting: %+v, %v; want ErrDispatchCursorMissing", r, err)
	}
	late, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: p.ID, Title: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := d.Round(ctx); !errors.Is(err, store.ErrDispatchCursorMissing) {
		t.Errorf("round without a cursor, an event waiting: %+v, %v; want ErrDispatchCursorMissing", r, err)
	}
	if n, err := f.db.WebhookDispatchBacklog(ctx); !errors.Is(err, store.ErrDispatchCursorMissing) {
		t.Errorf("backlog without a cursor: %d, %v; want ErrDispatchCursorMissing", n, err)
	}
	var n int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_dispatch_cursor`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the cursor was made again (%d rows, %v): it must be restored by hand", n, err)
	}

	// Run logs it at ERROR.
	records := make(errorRecords, 16)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&store.WebhookDispatcher{DB: store.New(f.db.Pool, slog.New(records))}).Run(runCtx)
	}()
	var line string
	select {
	case line = <-records:
	case <-time.After(time.Minute):
		t.Error("a dispatcher without a cursor logged nothing at ERROR in a minute")
	}
	cancel()
	<-done
	if !strings.Contains(line, "webhook dispatcher") || !strings.Contains(line, "webhook_dispatch_cursor") {
		t.Errorf("logged %q; want the dispatcher naming its missing cursor", line)
	}

	// Restored as docs/operations.md says, at the spine position of the
	// newest event with a delivery, the dispatcher delivers what waits,
	// nothing twice (a second delivery of an event would fail the round on
	// webhook_deliveries_event_key).
	if _, err := f.db.Pool.Exec(ctx, restoreDispatchCursorSQL); err != nil {
		t.Fatal(err)
	}
	storetest.DispatchAll(t, f.db)
	got := f.deliveredEvents(t, ep)
	if len(got) != 3 {
		t.Errorf("after the cursor was restored: deliveries of %d events, want 3 (a, b, c)", len(got))
	}
	var lateEvent string
	if err := f.db.Pool.QueryRow(ctx, `SELECT id::text FROM audit_events WHERE entity_id = $1 AND action = 'task.created'`,
		late.ID).Scan(&lateEvent); err != nil {
		t.Fatal(err)
	}
	if got[lateEvent] != 1 {
		t.Errorf("the event made while the cursor was missing has %d deliveries, want 1", got[lateEvent])
	}
}

// restoreDispatchCursorSQL is the statement of docs/operations.md that
// restores the dispatcher's cursor.
const restoreDispatchCursorSQL = `INSERT INTO webhook_dispatch_cursor (id, tx_id, seq, moved_at)
SELECT 1, e.tx_id, e.seq, now() FROM webhook_deliveries d JOIN audit_events e ON e.id = d.event_id
WHERE e.tx_id IS NOT NULL ORDER BY e.tx_id DESC, e.seq DESC LIMIT 1`
