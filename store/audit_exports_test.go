package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

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
	taken, err := s.db.TakeOverAuditExports(s.ctx, bound, 2, time.Hour)
	if err != nil || len(taken) != 2 || taken[0].ID != ids["staler"] && taken[1].ID != ids["staler"] ||
		taken[0].ID != ids["stale"] && taken[1].ID != ids["stale"] {
		t.Fatalf("a pass of limit 2 took over %+v, %v; want staler and stale", taken, err)
	}
	more, err := s.db.TakeOverAuditExports(s.ctx, bound, 100, time.Hour)
	if err != nil || len(more) != 1 || more[0].ID != ids["justStale"] {
		t.Fatalf("the next pass took over %+v, %v; want justStale alone", more, err)
	}
	if again, err := s.db.TakeOverAuditExports(s.ctx, bound, 100, time.Hour); err != nil || len(again) != 0 {
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

// The statements of a server of before the takeover (releases before
// 2026-12-05: no run, no lease, no heartbeat), word for word: the job's
// begin, finish and fail name the export by its id alone. During a rolling
// upgrade such an instance still works export jobs against the new schema.
const (
	legacyBegin = `UPDATE audit_exports x SET state = 'RUNNING', started_at = now(),
			events_written = 0, bytes = 0, error = NULL, object_key = $2
		WHERE x.id = $1 AND x.state IN ('QUEUED', 'RUNNING') RETURNING x.id, x.filter`
	legacyFinish = `UPDATE audit_exports SET state = 'SUCCEEDED', events_written = $2, bytes = $3,
			finished_at = now(), expires_at = now() + $4::interval
		WHERE id = $1 AND state = 'RUNNING'`
	legacyFail = `UPDATE audit_exports x SET state = 'FAILED', error = $2, finished_at = now(),
			expires_at = now() + $3::interval, object_key = NULL
		FROM (SELECT id, object_key FROM audit_exports WHERE id = $1 FOR UPDATE) old
		WHERE x.id = old.id AND x.state IN ('QUEUED', 'RUNNING') RETURNING coalesce(old.object_key, '')`
)

// legacy runs the old server's statements on export id, returning the rows
// each touched.
func (s *exportsSetup) legacy(stmt, id string) int64 {
	s.t.Helper()
	switch stmt {
	case legacyBegin:
		return s.exec(stmt, id, "audit-exports/"+id)
	case legacyFinish:
		return s.exec(stmt, id, 9, 90, "24 hours")
	case legacyFail:
		return s.exec(stmt, id, "the export failed; start it again", "24 hours")
	}
	s.t.Fatalf("not a legacy statement: %s", stmt)
	return 0
}

// The end of an export (SUCCEEDED or FAILED) is fenced by the database, not
// only by the WHERE of the new server's statements: an old server's run,
// which finishes and fails an export by its id alone, cannot end an export
// that was taken over (and begun by the new run) or begun again by another
// run since it began it. It still ends an export it holds, and its begin
// stops the new server's run it replaces, as a new begin would.
func TestAuditExportEndFencedForOldServers(t *testing.T) {
	t.Parallel()
	s := setupExports(t)

	// Taken over: an old server's run stops stamping a heartbeat (set here
	// as migration 0019 sets one for the runs it finds), the takeover gives
	// the export to run 2, which begins.
	taken := s.start()
	s.legacy(legacyBegin, taken)
	s.staleBy(taken, "1 hour")
	if got, err := s.db.TakeOverAuditExports(s.ctx, time.Minute, 10, time.Hour); err != nil || len(got) != 1 {
		t.Fatalf("takeover: %+v, %v", got, err)
	}
	run2 := s.begin(taken, 2)
	if n := s.legacy(legacyFinish, taken); n != 0 {
		t.Errorf("the old run taken over finished the export (%d rows): %+v", n, s.row(taken))
	}
	if n := s.legacy(legacyFail, taken); n != 0 {
		t.Errorf("the old run taken over failed the export (%d rows): %+v", n, s.row(taken))
	}
	if r := s.row(taken); r.State != "RUNNING" || r.ObjectKey != taken+".2" || r.Lease != run2.Lease {
		t.Errorf("after the old run's ends: %+v, want RUNNING under run 2", r)
	}
	if err := s.db.FinishAuditExport(s.ctx, taken, run2.Lease, 3, 30, time.Hour); err != nil {
		t.Errorf("the finish of run 2: %v", err)
	}

	// Begun again: River runs the old server's job again on a new server
	// (its timeout passed while the old run still went).
	again := s.start()
	s.legacy(legacyBegin, again)
	rerun := s.begin(again, 1)
	if n := s.legacy(legacyFinish, again); n != 0 {
		t.Errorf("the old run begun again finished the export (%d rows): %+v", n, s.row(again))
	}
	if err := s.db.FinishAuditExport(s.ctx, again, rerun.Lease, 3, 30, time.Hour); err != nil {
		t.Errorf("the finish of the new run: %v", err)
	}

	// The other way: an old server begins an export a new server's run
	// holds. The new run loses it (as to any begin); the old run ends it.
	stolen := s.start()
	newer := s.begin(stolen, 1)
	s.legacy(legacyBegin, stolen)
	if err := s.db.HeartbeatAuditExport(s.ctx, stolen, newer.Lease); !errors.Is(err, store.ErrAuditExportGone) {
		t.Errorf("the heartbeat of a run whose export an old server began since: %v", err)
	}
	if err := s.db.FinishAuditExport(s.ctx, stolen, newer.Lease, 1, 1, time.Hour); !errors.Is(err, store.ErrAuditExportGone) {
		t.Errorf("the finish of a run whose export an old server began since: %v", err)
	}
	if n := s.legacy(legacyFinish, stolen); n != 1 {
		t.Errorf("the old run could not finish the export it holds: %d rows, %+v", n, s.row(stolen))
	}
	if r := s.row(stolen); r.State != "SUCCEEDED" || r.ObjectKey != "audit-exports/"+stolen || r.Events != 9 {
		t.Errorf("finished by the old run: %+v", r)
	}

	// An old run ends the export it holds, as before the upgrade.
	for _, end := range []string{legacyFinish, legacyFail} {
		id := s.start()
		s.legacy(legacyBegin, id)
		if n := s.legacy(end, id); n != 1 {
			t.Errorf("the old run could not end the export it holds: %d rows, %+v", n, s.row(id))
		}
	}
}

// The new server's own ends are not refused by the fence: a run's finish
// and failure, and the expiry's failure of an export stranded QUEUED or
// RUNNING (12 hours after its start).
func TestAuditExportEndsOfTheNewServer(t *testing.T) {
	t.Parallel()
	s := setupExports(t)
	finished, failed, queued, running := s.start(), s.start(), s.start(), s.start()
	r := s.begin(finished, 1)
	if err := s.db.FinishAuditExport(s.ctx, finished, r.Lease, 1, 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	r = s.begin(failed, 1)
	if _, err := s.db.FailAuditExport(s.ctx, failed, r.Lease, "no", time.Hour); err != nil {
		t.Fatal(err)
	}
	s.begin(running, 1)
	s.exec(`UPDATE audit_exports SET created_at = now() - interval '13 hours' WHERE id IN ($1, $2)`, queued, running)
	if _, expired, stranded, err := s.db.ExpireAuditExports(s.ctx, 100); err != nil || expired != 0 || stranded != 2 {
		t.Fatalf("expiry: %d expired, %d stranded, %v; want the 2 stranded", expired, stranded, err)
	}
	for id, want := range map[string]string{finished: "SUCCEEDED", failed: "FAILED", queued: "FAILED", running: "FAILED"} {
		if got := s.row(id); got.State != want {
			t.Errorf("%+v, want %s", got, want)
		}
	}
}

// An export an old server's run held when the upgrade migrated the schema
// (its heartbeat is taken to be its start): taken over, that run cannot end
// it; not taken over, it still can.
func TestAuditExportRunOfBeforeTheMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := poolMigratedBefore(t, "0019")
	var user, ws string
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('o@example.com', 'O', 'x')
		RETURNING id`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('w') RETURNING id`).Scan(&ws); err != nil {
		t.Fatal(err)
	}
	stopped, going := uuid.NewString(), uuid.NewString()
	for _, id := range []string{stopped, going} {
		if _, err := pool.Exec(ctx, `INSERT INTO audit_exports (id, workspace_id, created_by, format, filter, created_at)
			VALUES ($1, $2, $3, 'NDJSON', '{}', now())`, id, ws, user); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, legacyBegin, id, "audit-exports/"+id); err != nil {
			t.Fatal(err)
		}
	}
	// The instance of this one stopped for the upgrade an hour into its run.
	if _, err := pool.Exec(ctx, `UPDATE audit_exports SET started_at = now() - interval '1 hour' WHERE id = $1`, stopped); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := &exportsSetup{auditFixture: &auditFixture{t: t, db: store.New(pool, nil)}, ctx: ctx}
	if got, err := s.db.TakeOverAuditExports(ctx, 30*time.Minute, 10, time.Hour); err != nil || len(got) != 1 || got[0].ID != stopped {
		t.Fatalf("takeover: %+v, %v; want the stopped run's export", got, err)
	}
	s.begin(stopped, 2)
	if n := s.legacy(legacyFinish, stopped); n != 0 {
		t.Errorf("the old run taken over finished the export (%d rows): %+v", n, s.row(stopped))
	}
	if n := s.legacy(legacyFinish, going); n != 1 {
		t.Errorf("the old run could not finish the export it holds: %d rows, %+v", n, s.row(going))
	}
}

// An export whose every run stops stamping its heartbeat is taken over
// AuditExportMaxTakeovers times; at the next silence it is marked FAILED
// (expiring ttl from then, its object forgotten for the caller to delete),
// not given another run. Another export, taken over fewer times, is taken
// over in the same pass.
func TestTakeOverAuditExportsFailsAfterMaxTakeovers(t *testing.T) {
	t.Parallel()
	s := setupExports(t)
	id, other := s.start(), s.start()
	s.begin(other, 1)
	for run := 1; run <= store.AuditExportMaxTakeovers+1; run++ {
		s.begin(id, run)
		s.staleBy(id, "1 hour")
		if run == store.AuditExportMaxTakeovers+1 {
			s.staleBy(other, "1 hour")
		}
		got, err := s.db.TakeOverAuditExports(s.ctx, time.Minute, 10, 3*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		mine := store.TakenOverAuditExport{ID: id, Run: run + 1, ObjectKey: id + "." + string(rune('0'+run))}
		if run > store.AuditExportMaxTakeovers {
			mine.Run, mine.Failed = run, true
		}
		if len(got) == 0 || got[0] != mine && (len(got) < 2 || got[1] != mine) {
			t.Fatalf("the pass after run %d took %+v; want %+v", run, got, mine)
		}
	}
	r := s.row(id)
	if r.State != "FAILED" || r.Run != store.AuditExportMaxTakeovers+1 || r.ObjectKey != "" || r.Heartbeat != nil ||
		r.Error == nil || !strings.Contains(*r.Error, "start it again") {
		t.Fatalf("after %d takeovers and a silence: %+v", store.AuditExportMaxTakeovers, r)
	}
	var ttl time.Duration
	if err := s.db.Pool.QueryRow(s.ctx, `SELECT expires_at - finished_at FROM audit_exports WHERE id = $1`, id).Scan(&ttl); err != nil ||
		ttl != 3*time.Hour {
		t.Errorf("it expires %v after it ended (%v), want 3h", ttl, err)
	}
	if runs := s.jobRuns(id); len(runs) != store.AuditExportMaxTakeovers+1 {
		t.Errorf("jobs of runs %v: one for the start and one per takeover", runs)
	}
	if o := s.row(other); o.State != "QUEUED" || o.Run != 2 {
		t.Errorf("the other export, taken over once: %+v", o)
	}
	if got, err := s.db.TakeOverAuditExports(s.ctx, time.Minute, 10, time.Hour); err != nil || len(got) != 0 {
		t.Errorf("a pass after: %+v, %v", got, err)
	}
}
