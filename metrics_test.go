package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// The read metrics report db.ReadStats: a read alone, then reads that
// waited behind one held by a table lock and shared a round trip.
func TestReadMetrics(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	db.SetReadBatches(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(readMetrics(db)...)
	viewer := &store.User{ID: "00000000-0000-4000-8000-000000000001"}
	task := "00000000-0000-4000-8000-000000000002"
	read := func() {
		if _, _, err := db.TaskWithAssignee(context.Background(), viewer, task); err == nil {
			t.Error("a task that does not exist was found")
		}
	}
	read()
	tx, err := db.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(read)
	}
	// One read waits for the lock in Postgres, three for its round trip.
	for deadline := time.Now().Add(20 * time.Second); db.ReadStats().Waiting != 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reads waiting: %+v", db.ReadStats())
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_db_reads_waiting Reads waiting for a round trip: every one of DATABASE_READ_BATCHES was in flight when they came.
# TYPE taskflow_db_reads_waiting gauge
taskflow_db_reads_waiting 3
`), "taskflow_db_reads_waiting"); err != nil {
		t.Error(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := `
# HELP taskflow_db_read_batches_total Round trips to Postgres that several requests' reads shared (DATABASE_READ_BATCHES).
# TYPE taskflow_db_read_batches_total counter
taskflow_db_read_batches_total 1
# HELP taskflow_db_reads_total Reads of tasks and task pages sent outside a transaction, by how: alone, together (sharing a round trip with other requests' reads), again (alone, after a failure before them in a shared round trip).
# TYPE taskflow_db_reads_total counter
taskflow_db_reads_total{sent="again"} 0
taskflow_db_reads_total{sent="alone"} 2
taskflow_db_reads_total{sent="together"} 3
# HELP taskflow_db_reads_waiting Reads waiting for a round trip: every one of DATABASE_READ_BATCHES was in flight when they came.
# TYPE taskflow_db_reads_waiting gauge
taskflow_db_reads_waiting 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The sealer's metrics: its backlog, and, once its cursor is deleted (the
// server's role may), taskflow_audit_seal_cursor_missing 1 and no backlog
// (it reaches no event then).
func TestSealMetrics(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(sealCollector{db: db})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_audit_seal_backlog Audit events the sealer has not reached yet (absent while its cursor is missing).
# TYPE taskflow_audit_seal_backlog gauge
taskflow_audit_seal_backlog 0
# HELP taskflow_audit_seal_cursor_missing 1 when the audit sealer's cursor (row 1 of audit_seal_cursor) is missing: nothing is sealed until it is restored; else 0.
# TYPE taskflow_audit_seal_cursor_missing gauge
taskflow_audit_seal_cursor_missing 0
`), "taskflow_audit_seal_backlog", "taskflow_audit_seal_cursor_missing"); err != nil {
		t.Error(err)
	}
	if _, err := db.Pool.Exec(t.Context(), `DELETE FROM audit_seal_cursor`); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_audit_seal_cursor_missing 1 when the audit sealer's cursor (row 1 of audit_seal_cursor) is missing: nothing is sealed until it is restored; else 0.
# TYPE taskflow_audit_seal_cursor_missing gauge
taskflow_audit_seal_cursor_missing 1
`), "taskflow_audit_seal_backlog", "taskflow_audit_seal_oldest_seconds", "taskflow_audit_seal_cursor_missing"); err != nil {
		t.Error(err)
	}
}

// taskflow_audit_checkpoints_withheld_total counts the checkpoints the
// sealer did not sign because the chain does not extend the last one signed
// of it: here a checkpoint signed with the sealer's key of a position the
// chain never reached (a row the server's role could insert, had it the
// key). It counts the tampering once, however many rounds find it (each
// would sign the chain: a sweep at every round), and a second forged
// checkpoint, further on, once more.
func TestWithheldCheckpointsMetric(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := storetest.DB(t)
	if err := db.EnsureAuditPartitions(ctx); err != nil {
		t.Fatal(err)
	}
	key := audit.GenerateSigningKey()
	sealer := &store.AuditSealer{DB: db, Key: key, CheckpointEvery: time.Nanosecond}
	reg := prometheus.NewRegistry()
	reg.MustRegister(checkpointMetrics(sealer)...)
	event := func() {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, metadata)
			VALUES (gen_random_uuid(), 'anonymous', 'user.login_failed', 'user', '', clock_timestamp(), '{}')`); err != nil {
			t.Fatal(err)
		}
	}
	want := func(n string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_audit_checkpoints_withheld_total Audit checkpoints this instance withheld: chains it did not sign because the chain no longer extends the last checkpoint signed of it (a seal at or after it changed or removed) or a seal since does not recompute from its event, a tampered log. Each tampering counts once, at the first sealer round of this instance that finds it; the ERROR line naming the chain repeats at every round that finds it until the chain is repaired, and a chain tampered anew after it was signed again counts again. Each instance counts for itself: summed over instances, a tampering counts once per instance that found it.
# TYPE taskflow_audit_checkpoints_withheld_total counter
taskflow_audit_checkpoints_withheld_total `+n+`
`), "taskflow_audit_checkpoints_withheld_total"); err != nil {
			t.Error(err)
		}
	}
	event()
	storetest.SealAll(t, sealer) // signs position 1
	want("0")
	forge := func(position int64) {
		t.Helper()
		bogus := sha256.Sum256([]byte("a head the chain never had"))
		cp := audit.SignCheckpoint(key, "anonymous", position, bogus[:], time.Now())
		sig, _ := base64.StdEncoding.DecodeString(cp.Signature)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_checkpoints (chain_key, position, head_hash, signed_at, key_id, public_key, signature)
			VALUES ('anonymous', $1, $2, $3, $4, $5, $6)`, position, bogus[:], cp.SignedAt, cp.KeyID, []byte(key.Public().(ed25519.PublicKey)), sig); err != nil {
			t.Fatal(err)
		}
	}
	rounds := func() {
		t.Helper()
		for range 5 {
			event()
			storetest.SealAll(t, sealer)
			if _, err := sealer.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := sealer.Checkpoint(ctx, "anonymous"); err == nil {
			t.Fatalf("signed position %d of a chain whose last checkpoint it does not extend", got.Position)
		}
	}
	forge(9)
	rounds()
	want("1")
	forge(50)
	rounds()
	want("2")
}

// taskflow_audit_checkpoints_blocked_total counts the checkpoints the sealer
// signed but could not store because a row that is not one of the same head
// already held their key: here a row the server's role inserted at the
// position the next checkpoint takes, with a signature of another key.
func TestBlockedCheckpointsMetric(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := storetest.DB(t)
	if err := db.EnsureAuditPartitions(ctx); err != nil {
		t.Fatal(err)
	}
	key := audit.GenerateSigningKey()
	sealer := &store.AuditSealer{DB: db, Key: key, CheckpointEvery: time.Hour}
	reg := prometheus.NewRegistry()
	reg.MustRegister(checkpointMetrics(sealer)...)
	want := func(n string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_audit_checkpoints_blocked_total Audit checkpoints this instance signed but did not store because a row of audit_checkpoints that is not a checkpoint of the same head already held their chain, position and key id (inserted by someone with write access to the database), logged at ERROR with the chain.
# TYPE taskflow_audit_checkpoints_blocked_total counter
taskflow_audit_checkpoints_blocked_total `+n+`
`), "taskflow_audit_checkpoints_blocked_total"); err != nil {
			t.Error(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, metadata)
		VALUES (gen_random_uuid(), 'anonymous', 'user.login_failed', 'user', '', clock_timestamp(), '{}')`); err != nil {
		t.Fatal(err)
	}
	storetest.SealAll(t, &store.AuditSealer{DB: db})
	want("0")
	var head []byte
	if err := db.Pool.QueryRow(ctx, `SELECT head_hash FROM audit_chain_heads WHERE chain_key = 'anonymous'`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	cp := audit.SignCheckpoint(audit.GenerateSigningKey(), "anonymous", 1, head, time.Now())
	sig, _ := base64.StdEncoding.DecodeString(cp.Signature)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_checkpoints (chain_key, position, head_hash, signed_at, key_id, public_key, signature)
		VALUES ('anonymous', 1, $1, $2, $3, $4, $5)`, head, cp.SignedAt, audit.KeyID(key.Public().(ed25519.PublicKey)),
		[]byte(key.Public().(ed25519.PublicKey)), sig); err != nil {
		t.Fatal(err)
	}
	if got, err := sealer.Checkpoint(ctx, "anonymous"); err == nil {
		t.Fatalf("Checkpoint returned %+v, the row in the way", got)
	}
	want("1")
}
