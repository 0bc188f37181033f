package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
