package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"taskflow/store"
)

// exportsSetup is a database with a workspace and its owner, for the tests
// of audit exports' runs: any number of exports of the workspace may be
// queued or running at once.
type exportsSetup struct {
	*auditFixture
	ctx   context.Context
	owner *store.User
	ws    string
}

func setupExports(t *testing.T) *exportsSetup {
	t.Helper()
	f := newAuditFixture(t)
	f.db.AuditExportLimits = store.AuditExportLimits{PerDay: 100, AtOnce: 100}
	owner := f.user("Owner")
	return &exportsSetup{auditFixture: f, ctx: t.Context(), owner: owner,
		ws: f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})}
}

// start starts an export of the workspace and returns its id.
func (s *exportsSetup) start() string {
	s.t.Helper()
	x, err := s.db.StartAuditExport(s.ctx, s.owner, store.AuditExportInput{WorkspaceID: s.ws, Format: store.AuditExportNDJSON})
	if err != nil {
		s.t.Fatal(err)
	}
	return x.ID
}

// begin begins the run-th run of export id, as its job does, with the
// object key "<id>.<run>".
func (s *exportsSetup) begin(id string, run int) *store.AuditExportRun {
	s.t.Helper()
	r, err := s.db.BeginAuditExport(s.ctx, id, run, id+"."+string(rune('0'+run)))
	if err != nil {
		s.t.Fatalf("begin run %d of %s: %v", run, id, err)
	}
	return r
}

// exec runs sql with args and returns the rows it touched.
func (s *exportsSetup) exec(sql string, args ...any) int64 {
	s.t.Helper()
	tag, err := s.db.Pool.Exec(s.ctx, sql, args...)
	if err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// staleBy makes the heartbeat of export id older than now by age (Postgres
// interval text).
func (s *exportsSetup) staleBy(id, age string) {
	s.t.Helper()
	if s.exec(`UPDATE audit_exports SET heartbeat_at = now() - $2::interval WHERE id = $1`, id, age) != 1 {
		s.t.Fatalf("no export %s", id)
	}
}

// exportRow is what the tests read of an export's row.
type exportRow struct {
	State, ObjectKey string
	Run              int
	Lease            int64
	Heartbeat        *time.Time
	Events, Bytes    int64
	Error            *string
}

func (s *exportsSetup) row(id string) exportRow {
	s.t.Helper()
	var r exportRow
	if err := s.db.Pool.QueryRow(s.ctx, `SELECT state, coalesce(object_key, ''), run, lease, heartbeat_at,
			events_written, bytes, error FROM audit_exports WHERE id = $1`, id).Scan(&r.State, &r.ObjectKey, &r.Run,
		&r.Lease, &r.Heartbeat, &r.Events, &r.Bytes, &r.Error); err != nil {
		s.t.Fatalf("export %s: %v", id, err)
	}
	return r
}

// jobRuns returns the runs of the River jobs of export id, in their order.
func (s *exportsSetup) jobRuns(id string) []int {
	s.t.Helper()
	var runs []int
	rows, err := s.db.Pool.Query(s.ctx, `SELECT coalesce((args->>'run')::int, 1) FROM river_job
		WHERE kind = 'audit_export' AND args->>'export_id' = $1 ORDER BY id`, id)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r int
		if err := rows.Scan(&r); err != nil {
			s.t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return runs
}

// TakeOverAuditExports takes over the exports RUNNING whose heartbeat is
// older than its bound, oldest heartbeat first and at most limit of them:
// each goes back to QUEUED under the next run and a new lease, its object
// and counts forgotten, and the new run's job is inserted. It leaves an
// export whose heartbeat is younger than the bound (however close to it),
// one QUEUED, and one that ended (SUCCEEDED or FAILED), whatever its
// heartbeat. The run taken over stamps nothing more, and its job, run
// again, finds the export gone; the new run's job begins it.
func TestTakeOverAuditExports(t *testing.T) {
	t.Parallel()
	s := setupExports(t)
	const bound = time.Hour
	ids := map[string]string{}
	leases := map[string]int64{}
	for _, name := range []string{"stale", "staler", "justStale", "fresh", "justFresh", "queued", "succeeded", "failed"} {
		ids[name] = s.start()
		if name != "queued" {
			leases[name] = s.begin(ids[name], 1).Lease
		}
	}
	if err := s.db.FinishAuditExport(s.ctx, ids["succeeded"], leases["succeeded"], 5, 50, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.FailAuditExport(s.ctx, ids["failed"], leases["failed"], "no", time.Hour); err != nil {
		t.Fatal(err)
	}
	s.exec(`UPDATE audit_exports SET events_written = 7, bytes = 70 WHERE id = $1`, ids["stale"])
	// The heartbeat of a run whose instance died; of a run dead for longer;
	// just past the bound (its age only grows); just within it (59 minutes:
	// the test would have to last a minute for it to pass the bound).
	s.staleBy(ids["stale"], "2 hours")
	s.staleBy(ids["staler"], "3 hours")
	s.staleBy(ids["justStale"], "1 hour 1 millisecond")
	s.staleBy(ids["justFresh"], "59 minutes")
	for _, name := range []string{"queued", "succeeded", "failed"} {
		s.staleBy(ids[name], "1 day")
	}

	// At most limit, the oldest heartbeats first.
	taken, err := s.db.TakeOverAuditExports(s.ctx, bound, 2)
	if err != nil || len(taken) != 2 || taken[0].ID != ids["staler"] && taken[1].ID != ids["staler"] ||
		taken[0].ID != ids["stale"] && taken[1].ID != ids["stale"] {
		t.Fatalf("a pass of limit 2 took over %+v, %v; want staler and stale", taken, err)
	}
	more, err := s.db.TakeOverAuditExports(s.ctx, bound, 100)
	if err != nil || len(more) != 1 || more[0].ID != ids["justStale"] {
		t.Fatalf("the next pass took over %+v, %v; want justStale alone", more, err)
	}
	if again, err := s.db.TakeOverAuditExports(s.ctx, bound, 100); err != nil || len(again) != 0 {
		t.Fatalf("a pass with nothing stale took over %+v, %v", again, err)
	}

	for _, x := range append(taken, more...) {
		if x.Run != 2 || x.ObjectKey != x.ID+".1" {
			t.Errorf("taken over: %+v; want run 2 and the object of run 1", x)
		}
		if r := s.row(x.ID); r.State != "QUEUED" || r.Run != 2 || r.ObjectKey != "" || r.Heartbeat != nil ||
			r.Events != 0 || r.Bytes != 0 || r.Lease <= leases[nameOf(ids, x.ID)] {
			t.Errorf("%s taken over: %+v", nameOf(ids, x.ID), r)
		}
		if runs := s.jobRuns(x.ID); len(runs) != 2 || runs[0] != 1 || runs[1] != 2 {
			t.Errorf("%s taken over: jobs of runs %v, want [1 2]", nameOf(ids, x.ID), runs)
		}
	}
	want := map[string]string{"fresh": "RUNNING", "justFresh": "RUNNING", "queued": "QUEUED", "succeeded": "SUCCEEDED", "failed": "FAILED"}
	for name, state := range want {
		if r := s.row(ids[name]); r.State != state || r.Run != 1 {
			t.Errorf("%s, left alone, is %+v; want %s under run 1", name, r, state)
		}
		if runs := s.jobRuns(ids[name]); len(runs) != 1 {
			t.Errorf("%s, left alone, has jobs of runs %v", name, runs)
		}
	}

	// The run taken over stamps nothing, finishes nothing, fails nothing.
	id, lease := ids["stale"], leases["stale"]
	if err := s.db.HeartbeatAuditExport(s.ctx, id, lease); !errors.Is(err, store.ErrAuditExportGone) {
		t.Errorf("heartbeat of the run taken over: %v", err)
	}
	if err := s.db.FinishAuditExport(s.ctx, id, lease, 1, 1, time.Hour); !errors.Is(err, store.ErrAuditExportGone) {
		t.Errorf("finish of the run taken over: %v", err)
	}
	if _, err := s.db.FailAuditExport(s.ctx, id, lease, "x", time.Hour); !errors.Is(err, store.ErrAuditExportGone) {
		t.Errorf("fail of the run taken over: %v", err)
	}
	// Its job run again finds the export gone; the new run's begins it.
	if _, err := s.db.BeginAuditExport(s.ctx, id, 1, id+".again"); !errors.Is(err, store.ErrAuditExportGone) {
		t.Errorf("begin of run 1 again: %v", err)
	}
	r := s.begin(id, 2)
	if err := s.db.FinishAuditExport(s.ctx, id, r.Lease, 3, 30, time.Hour); err != nil {
		t.Fatalf("finish of run 2: %v", err)
	}
	if got := s.row(id); got.State != "SUCCEEDED" || got.ObjectKey != id+".2" || got.Events != 3 {
		t.Errorf("after run 2: %+v", got)
	}
}

func nameOf(ids map[string]string, id string) string {
	for name, x := range ids {
		if x == id {
			return name
		}
	}
	return id
}
