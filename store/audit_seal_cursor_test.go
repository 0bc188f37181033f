package store_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// errorRecords is a slog handler that sends the messages and errors of
// ERROR records to a channel (dropping them when it is full).
type errorRecords chan string

func (c errorRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (c errorRecords) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.Key + "=" + a.Value.String(); return true })
	select {
	case c <- line:
	default:
	}
	return nil
}
func (c errorRecords) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c errorRecords) WithGroup(string) slog.Handler      { return c }

// unsealed returns the id of the one event of chain that has no seal.
func unsealed(t *testing.T, db *store.DB, chain string) string {
	t.Helper()
	var id string
	if err := db.Pool.QueryRow(context.Background(), `SELECT e.id::text FROM audit_events e WHERE e.chain_key = $1
		AND NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.event_id = e.id)`, chain).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Found in review (2026-12-04): the server's own database role may delete
// the sealer's cursor (row 1 of audit_seal_cursor, made by migration 0007).
// Then the sealer's look for waiting events found none and its lock looked
// busy, for ever: nothing was sealed, nothing logged, its backlog read 0,
// and verifyAuditLog failed with INTERNAL. Now a round fails with
// ErrSealCursorMissing (logged at ERROR by Run at every retry), the backlog
// is that error too, the cursor is not made again (that would seal sealed
// events a second time), and verification answers: a chain whose events are
// all sealed is valid, one with an event the sealer will never reach is
// invalid at that event.
func TestSealerReportsAMissingCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, _ := sealedWorkspace(t)
	_, quiet := f.ownedWorkspace(2)
	f.seal()
	f.append(ctx, auditWsEvent(ws, nil, "task.created", "6", nil), nil)
	late := unsealed(t, f.db, ws)
	if _, err := f.db.Pool.Exec(ctx, `DELETE FROM audit_seal_cursor`); err != nil {
		t.Fatal(err)
	}
	key := audit.GenerateSigningKey()
	for name, s := range map[string]*store.AuditSealer{
		"looking":  {DB: f.db},
		"sweeping": {DB: f.db, Key: key, CheckpointEvery: time.Nanosecond}, // goes to the lock
	} {
		if r, err := s.Round(ctx); !errors.Is(err, store.ErrSealCursorMissing) {
			t.Errorf("%s round without a cursor: %+v, %v; want ErrSealCursorMissing", name, r, err)
		}
	}
	if b, err := f.db.AuditSealBacklog(ctx); !errors.Is(err, store.ErrSealCursorMissing) {
		t.Errorf("backlog without a cursor: %+v, %v; want ErrSealCursorMissing", b, err)
	}
	var n int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_seal_cursor`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the cursor was made again (%d rows, %v): it must be restored by hand", n, err)
	}

	v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, nil, nil)
	if err != nil {
		t.Fatalf("verify without a cursor: %v", err)
	}
	if v.Valid || v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != late || v.SealedEvents != 5 || v.UnsealedEvents != 0 {
		t.Errorf("verify without a cursor: valid %v, first invalid %s, %d sealed, %d unsealed; want invalid at the event no sealer will reach (%s), 5 and 0",
			v.Valid, str(v.FirstInvalidEventID), v.SealedEvents, v.UnsealedEvents, late)
	}
	if v, err := f.db.VerifyChain(ctx, quiet); err != nil || !v.Valid || v.SealedEvents != 2 {
		t.Errorf("a chain sealed whole, without a cursor: %+v, %v; want valid", v, err)
	}

	// Run logs it at ERROR.
	records := make(errorRecords, 16)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&store.AuditSealer{DB: store.New(f.db.Pool, slog.New(records))}).Run(runCtx)
	}()
	var line string
	select {
	case line = <-records:
	case <-time.After(time.Minute):
		t.Error("a sealer without a cursor logged nothing at ERROR in a minute")
	}
	cancel()
	<-done
	if !strings.Contains(line, "audit sealer") || !strings.Contains(line, "audit_seal_cursor") {
		t.Errorf("logged %q; want the sealer naming its missing cursor", line)
	}

	// Restored as docs/operations.md says, at the spine position of the
	// newest sealed event, the sealer seals what waits, nothing twice.
	if _, err := f.db.Pool.Exec(ctx, restoreSealCursorSQL); err != nil {
		t.Fatal(err)
	}
	storetest.Seal(t, f.db)
	if v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, nil, nil); err != nil || !v.Valid || v.SealedEvents != 6 || v.UnsealedEvents != 0 {
		t.Errorf("after the cursor was restored: %+v, %v; want valid, 6 sealed", v, err)
	}
}

// restoreSealCursorSQL is the statement of docs/operations.md that restores
// the sealer's cursor.
const restoreSealCursorSQL = `INSERT INTO audit_seal_cursor (id, tx_id, seq, moved_at)
SELECT 1, tx_id, seq, now() FROM (
  (SELECT e.tx_id, e.seq FROM audit_seals s JOIN audit_events e ON e.id = s.event_id AND e.occurred_at = s.occurred_at
   WHERE e.tx_id IS NOT NULL ORDER BY e.tx_id DESC, e.seq DESC LIMIT 1)
  UNION ALL SELECT '0', 0) c
ORDER BY tx_id DESC, seq DESC LIMIT 1`

// Found in review (2026-12-04): moving the sealer's cursor back (the
// server's role may) makes its next round seal sealed events again, which
// fails (logged) at every round: no event is sealed again. Verification
// counted the sealed events past the cursor as unsealed too (waiting), and
// called a chain valid whose new events no sealer will reach. It now takes
// such a cursor as a stopped sealer: the sealed events count once, and an
// event of the chain left unsealed is reported.
func TestVerifyWithTheSealCursorMovedBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, ids := sealedWorkspace(t)
	if _, err := f.db.Pool.Exec(ctx, `UPDATE audit_seal_cursor c SET tx_id = e.tx_id, seq = e.seq
		FROM audit_events e WHERE c.id = 1 AND e.id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, nil, nil); err != nil || !v.Valid || v.SealedEvents != 5 || v.UnsealedEvents != 0 {
		t.Errorf("cursor moved back, every event sealed: %+v, %v; want valid, 5 sealed and 0 unsealed", v, err)
	}
	f.append(ctx, auditWsEvent(ws, nil, "task.created", "6", nil), nil)
	late := unsealed(t, f.db, ws)
	if _, err := (&store.AuditSealer{DB: f.db}).Round(ctx); err == nil {
		t.Fatal("a sealer behind sealed events sealed them again")
	}
	v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, []ed25519.PublicKey{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid || v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != late || v.SealedEvents != 5 || v.UnsealedEvents != 0 {
		t.Errorf("cursor moved back: valid %v, first invalid %s, %d sealed, %d unsealed; want invalid at the event no sealer will reach (%s), 5 and 0",
			v.Valid, str(v.FirstInvalidEventID), v.SealedEvents, v.UnsealedEvents, late)
	}
}

// Found in review (2026-12-04): AuditSealer.Checkpoint locks the sealer's
// cursor to wait for a round in progress, but without the row its lock took
// nothing and it signed anyway, unordered with any sealing round. It now
// refuses with ErrSealCursorMissing, as the sealer's rounds do, and signs
// nothing.
func TestCheckpointRefusesWithoutTheSealCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _, ws, _ := sealedWorkspace(t)
	if _, err := f.db.Pool.Exec(ctx, `DELETE FROM audit_seal_cursor`); err != nil {
		t.Fatal(err)
	}
	cp, err := (&store.AuditSealer{DB: f.db, Key: audit.GenerateSigningKey()}).Checkpoint(ctx, ws)
	if !errors.Is(err, store.ErrSealCursorMissing) {
		t.Errorf("checkpoint without a cursor: %+v, %v; want ErrSealCursorMissing", cp, err)
	}
	var n int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_checkpoints WHERE chain_key = $1`, ws).Scan(&n); err != nil || n != 0 {
		t.Errorf("a checkpoint without a cursor stored %d checkpoints (%v), want 0", n, err)
	}
}
