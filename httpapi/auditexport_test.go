package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"taskflow/auditexport"
	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/store"
)

const startExportMutation = `mutation($in: StartAuditExportInput!, $key: String) {
	startAuditExport(input: $in, idempotencyKey: $key) { id state format eventsWritten bytes downloadUrl error createdAt } }`

const auditExportQuery = `query($id: ID!) { auditExport(id: $id) {
	id workspaceId state format eventsWritten bytes createdAt startedAt finishedAt expiresAt downloadUrl error } }`

// exportView is an AuditExport as the API answers it.
type exportView struct {
	ID            string
	WorkspaceID   string
	State         string
	Format        string
	EventsWritten int
	Bytes         int
	StartedAt     *time.Time
	FinishedAt    *time.Time
	ExpiresAt     *time.Time
	DownloadURL   *string
	Error         *string
}

// exportEnv is an audit env whose blob store's directory the test knows.
type exportEnv struct {
	*auditEnv
	dir string
}

func newExportEnv(t *testing.T, opts ...apitest.Option) *exportEnv {
	t.Helper()
	dir := t.TempDir()
	e := newAuditEnv(t, append(opts, func(o *httpapi.Options) {
		bs, err := blobs.Open(t.Context(), blobs.Options{URL: "file://" + filepath.ToSlash(dir) + "?no_tmp_dir=true&metadata=skip",
			DB: o.DB, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bs.Close() })
		o.Blobs = bs
	})...)
	for i := range 30 {
		e.event(t, e.ws, e.owner, []string{"task.created", "task.updated", "project.created"}[i%3], uuidFor(i), map[string]any{"n": i})
	}
	e.event(t, e.other, e.stranger, "task.created", uuidFor(99), nil)
	return &exportEnv{auditEnv: e, dir: dir}
}

func uuidFor(i int) string {
	return "00000000-0000-0000-0000-" + strings.Repeat("0", 10) + string(rune('0'+i/10)) + string(rune('0'+i%10))
}

func (e *exportEnv) start(t *testing.T, u apitest.User, in map[string]any, key *string) (*exportView, *apitest.Response) {
	t.Helper()
	vars := map[string]any{"in": in}
	if key != nil {
		vars["key"] = *key
	}
	r := e.Post(t, u.Token, startExportMutation, vars)
	if len(r.Body.Errors) > 0 {
		return nil, r
	}
	var out struct{ StartAuditExport exportView }
	if err := json.Unmarshal(r.Body.Data, &out); err != nil {
		t.Fatalf("%s: %v", r.Raw, err)
	}
	return &out.StartAuditExport, r
}

// started starts an export of e's workspace in format as its admin, and
// fails the test if it is refused.
func (e *exportEnv) started(t *testing.T, format string) *exportView {
	t.Helper()
	x, r := e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": format}, nil)
	if x == nil {
		t.Fatalf("start: %s", r.Raw)
	}
	return x
}

func (e *exportEnv) get(t *testing.T, u apitest.User, id string) (*exportView, *apitest.Response) {
	t.Helper()
	r := e.Post(t, u.Token, auditExportQuery, map[string]any{"id": id})
	var out struct{ AuditExport *exportView }
	_ = json.Unmarshal(r.Body.Data, &out)
	return out.AuditExport, r
}

func (e *exportEnv) worker(o auditexport.Options) *auditexport.Worker {
	o.DB, o.Blobs, o.Log = e.DB, e.Blobs, quiet
	return auditexport.NewWorker(o)
}

// job returns the River job the start of export id inserted, as its worker
// gets it at its attempt-th run.
func (e *exportEnv) job(t *testing.T, id string, attempt int) *river.Job[store.AuditExportArgs] {
	t.Helper()
	return e.runJob(t, id, 1, attempt)
}

// runJob returns the River job of the run-th run of export id (1: its
// start's, 2: the first takeover's), as its worker gets it at its
// attempt-th run.
func (e *exportEnv) runJob(t *testing.T, id string, run, attempt int) *river.Job[store.AuditExportArgs] {
	t.Helper()
	var jobID int64
	var queue string
	var maxAttempts int
	var args []byte
	if err := e.DB.Pool.QueryRow(t.Context(), `SELECT id, queue, max_attempts, args FROM river_job
		WHERE kind = 'audit_export' AND args->>'export_id' = $1 AND (args->>'run')::int = $2`, id, run).Scan(&jobID, &queue,
		&maxAttempts, &args); err != nil {
		t.Fatalf("the export's job of run %d: %v", run, err)
	}
	if queue != store.AuditExportQueue {
		t.Fatalf("queue %q", queue)
	}
	j := &river.Job[store.AuditExportArgs]{JobRow: &rivertype.JobRow{ID: jobID, Attempt: attempt, MaxAttempts: maxAttempts,
		Kind: "audit_export", Queue: queue}}
	if err := json.Unmarshal(args, &j.Args); err != nil {
		t.Fatal(err)
	}
	return j
}

// download GETs path with u's token (and headers).
func (e *exportEnv) download(t *testing.T, path, token string, headers ...string) *apitest.Response {
	t.Helper()
	return send(t, e.Env, http.MethodGet, path, token, headers...)
}

// files lists the files under the blob store's directory.
func (e *exportEnv) files(t *testing.T) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(e.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// Start, run, download: the file is byte for byte what GET /audit/export
// answers for the same filter and format, in both formats; Range works;
// the blob sweeper spares the file.
func TestAuditExportStartRunDownload(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	for i, format := range []string{"CSV", "NDJSON"} {
		t.Run(format, func(t *testing.T) {
			x, r := e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": format,
				"filter": map[string]any{"actions": []string{"task.*", "audit.*"}}}, nil)
			if x == nil {
				t.Fatalf("start: %s", r.Raw)
			}
			if x.State != "QUEUED" || x.DownloadURL != nil || x.Format != format {
				t.Fatalf("started: %+v", x)
			}
			if err := e.worker(auditexport.Options{}).Work(t.Context(), e.job(t, x.ID, 1)); err != nil {
				t.Fatalf("work: %v", err)
			}
			got, r := e.get(t, e.admin, x.ID)
			if got == nil || got.State != "SUCCEEDED" || got.DownloadURL == nil || got.FinishedAt == nil || got.ExpiresAt == nil ||
				got.StartedAt == nil {
				t.Fatalf("after the run: %s", r.Raw)
			}
			if d := got.ExpiresAt.Sub(*got.FinishedAt); d < 23*time.Hour || d > 25*time.Hour {
				t.Fatalf("expires %v after it finished, want 24h", d)
			}
			// 20 task.* events, and audit.export_started of this export and
			// of those before it.
			if got.EventsWritten != 21+i {
				t.Fatalf("eventsWritten %d, want %d", got.EventsWritten, 21+i)
			}
			file := e.download(t, *got.DownloadURL, e.admin.Token)
			if file.Status != http.StatusOK || len(file.Raw) != got.Bytes {
				t.Fatalf("download: %d, %d bytes (bytes %d): %.300s", file.Status, len(file.Raw), got.Bytes, file.Raw)
			}
			if header, _, _ := bytes.Cut(file.Raw, []byte("\n")); format == "CSV" && !bytes.HasSuffix(header, []byte(",traceId,sealedAt")) {
				t.Fatalf("the file's CSV header %q does not end with traceId,sealedAt", header)
			}
			sync := e.download(t, "/audit/export?"+url.Values{"workspaceId": {e.ws}, "format": {strings.ToLower(format)},
				"actions": {"task.*,audit.*"}}.Encode(), e.admin.Token)
			if sync.Status != http.StatusOK || !bytes.Equal(file.Raw, sync.Raw) {
				t.Fatalf("the file differs from the sync export:\n%s\n---\n%s", file.Raw, sync.Raw)
			}
			if ct := file.Header.Get("Content-Type"); ct != sync.Header.Get("Content-Type") {
				t.Fatalf("Content-Type %q, sync %q", ct, sync.Header.Get("Content-Type"))
			}
			part := e.download(t, *got.DownloadURL, e.admin.Token, "Range", "bytes=5-14")
			if part.Status != http.StatusPartialContent || !bytes.Equal(part.Raw, file.Raw[5:15]) {
				t.Fatalf("range: %d %q", part.Status, part.Raw)
			}
			if _, err := e.Blobs.Sweep(t.Context(), time.Now().Add(48*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if again := e.download(t, *got.DownloadURL, e.admin.Token); !bytes.Equal(again.Raw, file.Raw) {
				t.Fatalf("after a blob sweep: %d %.200s", again.Status, again.Raw)
			}
		})
	}
	var list struct {
		Workspace struct {
			AuditExports struct {
				Nodes    []exportView
				PageInfo struct{ HasNextPage bool }
			}
		}
	}
	r := e.Post(t, e.owner.Token, `query($ws: ID!) { workspace(id: $ws) { auditExports(first: 1) { nodes { id format state } pageInfo { hasNextPage } } } }`,
		map[string]any{"ws": e.ws})
	if err := json.Unmarshal(r.Body.Data, &list); err != nil || len(list.Workspace.AuditExports.Nodes) != 1 ||
		list.Workspace.AuditExports.Nodes[0].Format != "NDJSON" || !list.Workspace.AuditExports.PageInfo.HasNextPage {
		t.Fatalf("the list: %s", r.Raw)
	}
}

// A start replayed with its idempotency key answers the same export and
// starts nothing more; the same key with another input is refused.
func TestAuditExportIdempotentStart(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	key := "export-" + uuidFor(1)
	in := map[string]any{"workspaceId": e.ws, "format": "CSV"}
	first, r := e.start(t, e.admin, in, &key)
	if first == nil {
		t.Fatalf("start: %s", r.Raw)
	}
	again, r := e.start(t, e.admin, in, &key)
	if again == nil || again.ID != first.ID {
		t.Fatalf("replay: %s", r.Raw)
	}
	var rows, jobs, events int
	if err := e.DB.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM audit_exports),
		(SELECT count(*) FROM river_job WHERE kind = 'audit_export'),
		(SELECT count(*) FROM audit_events WHERE action = 'audit.export_started')`).Scan(&rows, &jobs, &events); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || jobs != 1 || events != 1 {
		t.Fatalf("%d exports, %d jobs, %d events after a replay; want 1 each", rows, jobs, events)
	}
	_, r = e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": "NDJSON"}, &key)
	if r.Code() != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("another input with the key: %s", r.Raw)
	}
}

// The access rule is the sync export's: OWNER and ADMIN of the workspace;
// FORBIDDEN for a MEMBER or VIEWER, NOT_FOUND for anyone else, for the
// start, the read and the download alike.
func TestAuditExportAccess(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	in := map[string]any{"workspaceId": e.ws, "format": "NDJSON"}
	for u, want := range map[apitest.User]string{e.member: "FORBIDDEN", e.viewer: "FORBIDDEN", e.stranger: "NOT_FOUND"} {
		if _, r := e.start(t, u, in, nil); r.Code() != want {
			t.Fatalf("start: %s, want %s", r.Raw, want)
		}
	}
	x, r := e.start(t, e.owner, in, nil)
	if x == nil {
		t.Fatalf("owner's start: %s", r.Raw)
	}
	if err := e.worker(auditexport.Options{}).Work(t.Context(), e.job(t, x.ID, 1)); err != nil {
		t.Fatal(err)
	}
	path := "/audit/exports/" + x.ID
	for u, want := range map[apitest.User]string{e.member: "FORBIDDEN", e.viewer: "FORBIDDEN", e.stranger: "NOT_FOUND"} {
		if got, r := e.get(t, u, x.ID); got != nil || r.Code() != want {
			t.Fatalf("read: %s, want %s", r.Raw, want)
		}
		status := map[string]int{"FORBIDDEN": http.StatusForbidden, "NOT_FOUND": http.StatusNotFound}[want]
		if r := e.download(t, path, u.Token); r.Status != status || r.Code() != want {
			t.Fatalf("download: %d %s, want %d", r.Status, r.Raw, status)
		}
	}
	if r := e.download(t, path, ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("download with no token: %d %s", r.Status, r.Raw)
	}
	if r := e.download(t, path, e.admin.Token); r.Status != http.StatusOK {
		t.Fatalf("the admin's download: %d %s", r.Status, r.Raw)
	}
}

// A run cut short half-way (its context cancelled while the file is being
// written: an instance stopping) leaves no file, nothing served, and River
// runs the job again: the next run starts over and succeeds.
func TestAuditExportCrashHalfWayThenRetry(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	e.manyEvents(t)
	x := e.started(t, "NDJSON")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	w := e.worker(auditexport.Options{})
	go func() { done <- w.Work(ctx, e.job(t, x.ID, 1)) }()
	// Cancelled once the file being written holds its first bytes.
	var partial int64
	for partial == 0 {
		select {
		case err := <-done:
			t.Fatalf("the run ended before it could be cut: %v", err)
		case <-time.After(time.Millisecond):
		}
		for _, f := range e.files(t) {
			if st, err := os.Stat(f); err == nil && st.Size() > 0 {
				partial = st.Size()
			}
		}
	}
	cancel()
	err := <-done
	if err == nil || errors.As(err, new(*river.JobCancelError)) {
		t.Fatalf("the cut run: %v, want an error River retries", err)
	}
	if files := e.files(t); len(files) != 0 {
		t.Fatalf("a cut run left files: %v (it had written %d bytes)", files, partial)
	}
	got, _ := e.get(t, e.admin, x.ID)
	if got.State != "RUNNING" || got.DownloadURL != nil {
		t.Fatalf("after the cut run: %+v", got)
	}
	if r := e.download(t, "/audit/exports/"+x.ID, e.admin.Token); r.Status != http.StatusConflict || r.Code() != "CONFLICT" {
		t.Fatalf("download of an unfinished export: %d %s", r.Status, r.Raw)
	}
	if err := w.Work(t.Context(), e.job(t, x.ID, 2)); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	got, _ = e.get(t, e.admin, x.ID)
	if got.State != "SUCCEEDED" || got.EventsWritten != 6031 || int64(got.Bytes) <= partial {
		t.Fatalf("after the retry: %+v (cut at %d bytes)", got, partial)
	}
	file := e.download(t, *got.DownloadURL, e.admin.Token)
	sync := e.download(t, "/audit/export?workspaceId="+e.ws, e.admin.Token)
	if !bytes.Equal(file.Raw, sync.Raw) {
		t.Fatalf("the retried file (%d bytes) differs from the sync export (%d)", len(file.Raw), len(sync.Raw))
	}
}

// manyEvents adds 6,000 events to e.ws: enough for many pages.
func (e *exportEnv) manyEvents(t *testing.T) {
	t.Helper()
	e.exec(t, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid, 'task.updated', 'task', gen_random_uuid(),
			'2026-06-01T00:00:00Z'::timestamptz + i * interval '1 second', '{"pad": "`+strings.Repeat("x", 200)+`"}'::jsonb
		FROM generate_series(1, 6000) i`, e.ws, e.owner.ID)
}

// A run stuck in its writer (its blob store stopped answering: no context
// is cancelled, and its heartbeat stops, as an instance that died) is left
// alone while its heartbeat is younger than AUDIT_EXPORT_TAKEOVER_AFTER,
// then taken over: a new run's job is inserted, and its file is whole and
// byte for byte the sync export. The old run, once its writes go on, learns
// at its next stamp that it lost the export and stops: it makes no object,
// and the export stays the new run's; its job, run again by River, finds
// the export gone.
func TestAuditExportStuckRunTakenOver(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	const after = time.Second
	x, g, old, done := e.startGated(t, 100, auditexport.Options{TakeoverAfter: after})
	// Its heartbeat is younger than a minute: a pass of that bound leaves it.
	if n, err := e.worker(auditexport.Options{TakeoverAfter: time.Minute}).TakeOver(t.Context()); err != nil || n != 0 {
		t.Fatalf("a pass took over %d exports (%v) whose run stamped its heartbeat less than a minute ago", n, err)
	}
	reg := prometheus.NewRegistry()
	pass := e.worker(auditexport.Options{TakeoverAfter: after, Registerer: reg})
	eventually(t, 2*time.Minute, "the stuck run taken over", func() bool {
		n, err := pass.TakeOver(t.Context())
		if err != nil || n > 1 {
			t.Fatalf("takeover: %d, %v", n, err)
		}
		return n == 1
	})
	if got := gathered(t, reg, "taskflow_audit_exports_finished_total", "taken_over"); got != 1 {
		t.Fatalf("taken_over counted %v times", got)
	}
	got, _ := e.get(t, e.admin, x.ID)
	if got.State != "QUEUED" || got.DownloadURL != nil {
		t.Fatalf("taken over: %+v", got)
	}
	if err := e.worker(auditexport.Options{}).Work(t.Context(), e.runJob(t, x.ID, 2, 1)); err != nil {
		t.Fatalf("the new run: %v", err)
	}
	sync := e.download(t, "/audit/export?workspaceId="+e.ws, e.admin.Token)
	check := func(when string) {
		t.Helper()
		got, _ := e.get(t, e.admin, x.ID)
		if got.State != "SUCCEEDED" || got.EventsWritten != 6031 || got.DownloadURL == nil {
			t.Fatalf("%s: %+v", when, got)
		}
		file := e.download(t, *got.DownloadURL, e.admin.Token)
		if file.Status != http.StatusOK || !bytes.Equal(file.Raw, sync.Raw) {
			t.Fatalf("%s: the file (%d, %d bytes) differs from the sync export (%d bytes)", when, file.Status, len(file.Raw), len(sync.Raw))
		}
	}
	check("after the new run")
	g.release()
	if err := <-done; err != nil {
		t.Fatalf("the old run, its writes let go: %v, want nil (it lost the export: its job is done)", err)
	}
	if c := g.committed(); len(c) != 0 {
		t.Fatalf("the old run made objects after it lost the export: %v", c)
	}
	// Not even a partial file is left.
	if files := e.files(t); len(files) != 1 || !strings.HasSuffix(files[0], ".2.1") {
		t.Fatalf("files %v, want the new run's alone", files)
	}
	check("after the old run went on")
	if err := old.Work(t.Context(), e.job(t, x.ID, 2)); err != nil {
		t.Fatalf("the old job run again: %v", err)
	}
	if c := g.committed(); len(c) != 0 {
		t.Fatalf("the old job run again made objects: %v", c)
	}
	check("after the old job ran again")
}

// An export whose runs all stop stamping their heartbeat is taken over
// store.AuditExportMaxTakeovers times, then FAILED at the next silence, with
// a message for its admins: counted as failed, not taken over.
func TestAuditExportFailedAfterMaxTakeovers(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	x := e.started(t, "CSV")
	reg := prometheus.NewRegistry()
	pass := e.worker(auditexport.Options{TakeoverAfter: time.Minute, Registerer: reg})
	for run := 1; run <= store.AuditExportMaxTakeovers+1; run++ {
		if _, err := e.DB.BeginAuditExport(t.Context(), x.ID, run, auditexport.ObjectKey(x.ID, run, 1)); err != nil {
			t.Fatalf("begin run %d: %v", run, err)
		}
		e.exec(t, `UPDATE audit_exports SET heartbeat_at = now() - interval '1 hour' WHERE id = $1`, x.ID)
		want := 1
		if run > store.AuditExportMaxTakeovers {
			want = 0 // failed
		}
		if n, err := pass.TakeOver(t.Context()); err != nil || n != want {
			t.Fatalf("the pass after run %d took over %d (%v), want %d", run, n, err, want)
		}
	}
	got, _ := e.get(t, e.admin, x.ID)
	if got.State != "FAILED" || got.Error == nil || !strings.Contains(*got.Error, "stopped making progress") || got.ExpiresAt == nil {
		t.Fatalf("after %d takeovers and a silence: %+v", store.AuditExportMaxTakeovers, got)
	}
	if n := gathered(t, reg, "taskflow_audit_exports_finished_total", "taken_over"); n != store.AuditExportMaxTakeovers {
		t.Errorf("taken_over %v, want %d", n, store.AuditExportMaxTakeovers)
	}
	if n := gathered(t, reg, "taskflow_audit_exports_finished_total", "failed"); n != 1 {
		t.Errorf("failed %v, want 1", n)
	}
}

// startGated starts an NDJSON export of many events and the first attempt
// of its job by a worker of o writing to a blob store of e.dir whose writes
// the returned gate lets pass pass before it holds them (newGate), closed
// when the test ends. It returns once the run's writes are held, with the
// worker and the channel of the run's end.
func (e *exportEnv) startGated(t *testing.T, pass int, o auditexport.Options) (*exportView, *gate, *auditexport.Worker, <-chan error) {
	t.Helper()
	e.manyEvents(t)
	x := e.started(t, "NDJSON")
	g, u := newGate(t, e.dir, pass)
	bs, err := blobs.Open(t.Context(), blobs.Options{URL: u, DB: e.DB, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	o.DB, o.Blobs, o.Log = e.DB, bs, quiet
	w := auditexport.NewWorker(o)
	job := e.job(t, x.ID, 1) // here: t.Fatal is not for the run's goroutine
	done := make(chan error, 1)
	go func() { done <- w.Work(t.Context(), job) }()
	select {
	case <-g.held:
	case err := <-done:
		t.Fatalf("the run ended before its writes were held: %v", err)
	}
	return x, g, w, done
}

// A run that goes on stamps its heartbeat as it writes (every eighth of
// AUDIT_EXPORT_TAKEOVER_AFTER), so that it is not taken over.
func TestAuditExportRunStampsItsHeartbeat(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	x, g, _, done := e.startGated(t, 3000, auditexport.Options{TakeoverAfter: 8 * time.Millisecond})
	// Held after 3,000 events, pages of them read from Postgres.
	var started, beat time.Time
	if err := e.DB.Pool.QueryRow(t.Context(), `SELECT started_at, heartbeat_at FROM audit_exports WHERE id = $1`, x.ID).Scan(&started,
		&beat); err != nil {
		t.Fatal(err)
	}
	if !beat.After(started) {
		t.Fatalf("3,000 events written, heartbeat %v, begun %v: never stamped", beat, started)
	}
	g.release()
	if err := <-done; err != nil {
		t.Fatalf("work: %v", err)
	}
	if got, _ := e.get(t, e.admin, x.ID); got.State != "SUCCEEDED" {
		t.Fatalf("after the run: %+v", got)
	}
}

// gathered returns the value of the counter or gauge name (the sample
// count of a histogram) whose one label has the value label ("" for none),
// gathered from reg; 0 when it is absent.
func gathered(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// The metrics: exports queued and running (read at each scrape), finished
// by outcome, the duration of their runs, the bytes of their files.
func TestAuditExportMetrics(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	reg := prometheus.NewRegistry()
	w := e.worker(auditexport.Options{Registerer: reg})
	x := e.started(t, "CSV")
	if q, run := gathered(t, reg, "taskflow_audit_exports", "QUEUED"), gathered(t, reg, "taskflow_audit_exports", "RUNNING"); q != 1 || run != 0 {
		t.Fatalf("queued %v, running %v; want 1 and 0", q, run)
	}
	if err := w.Work(t.Context(), e.job(t, x.ID, 1)); err != nil {
		t.Fatal(err)
	}
	got, _ := e.get(t, e.admin, x.ID)
	if q := gathered(t, reg, "taskflow_audit_exports", "QUEUED"); q != 0 {
		t.Fatalf("queued %v after the run", q)
	}
	if n := gathered(t, reg, "taskflow_audit_exports_finished_total", "succeeded"); n != 1 {
		t.Fatalf("succeeded %v", n)
	}
	if b := gathered(t, reg, "taskflow_audit_export_bytes_total", ""); b != float64(got.Bytes) || b == 0 {
		t.Fatalf("bytes %v, the file %d", b, got.Bytes)
	}
	if n := gathered(t, reg, "taskflow_audit_export_duration_seconds", "succeeded"); n != 1 {
		t.Fatalf("%v durations of succeeded runs", n)
	}
	y, r := e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": "CSV"}, nil)
	if y == nil {
		t.Fatalf("start: %s", r.Raw)
	}
	small := e.worker(auditexport.Options{Registerer: reg, MaxBytes: 100})
	if err := small.Work(t.Context(), e.job(t, y.ID, 1)); !errors.As(err, new(*river.JobCancelError)) {
		t.Fatalf("a file over its bound: %v", err)
	}
	if n := gathered(t, reg, "taskflow_audit_exports_finished_total", "failed"); n != 1 {
		t.Fatalf("failed %v", n)
	}
	// A third, left QUEUED past store.AuditExportStrandedAfter, is failed by
	// the expiry pass, and counted so.
	z, r := e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": "CSV"}, nil)
	if z == nil {
		t.Fatalf("start: %s", r.Raw)
	}
	e.exec(t, `UPDATE audit_exports SET created_at = now() - interval '13 hours' WHERE state = 'QUEUED'`)
	e.exec(t, `UPDATE audit_exports SET expires_at = now() - interval '1 second' WHERE state <> 'QUEUED'`)
	if n, err := w.Expire(t.Context()); err != nil || n != 2 {
		t.Fatalf("expire: %d, %v", n, err)
	}
	if n := gathered(t, reg, "taskflow_audit_exports_finished_total", "expired"); n != 2 {
		t.Fatalf("expired %v", n)
	}
	if got, _ := e.get(t, e.admin, z.ID); got.State != "FAILED" {
		t.Fatalf("the stranded export is %s, want FAILED", got.State)
	}
	if n := gathered(t, reg, "taskflow_audit_exports_finished_total", "failed"); n != 2 {
		t.Fatalf("failed %v after the stranded export, want 2", n)
	}
}

// AUDIT_EXPORT_AT_ONCE and AUDIT_EXPORT_PER_DAY (store.DB.AuditExportLimits)
// bound the starts of a workspace in their place.
func TestAuditExportConfiguredStartLimits(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t, func(o *httpapi.Options) { o.DB.AuditExportLimits = store.AuditExportLimits{PerDay: 3, AtOnce: 2} })
	in := map[string]any{"workspaceId": e.ws, "format": "NDJSON"}
	for i := range 2 {
		if x, r := e.start(t, e.admin, in, nil); x == nil {
			t.Fatalf("start %d with 2 at once: %s", i+1, r.Raw)
		}
	}
	if _, r := e.start(t, e.admin, in, nil); r.Code() != "CONFLICT" || !strings.Contains(string(r.Raw), "2 audit exports") {
		t.Fatalf("a third at once: %s", r.Raw)
	}
	e.exec(t, `UPDATE audit_exports SET state = 'SUCCEEDED', ended_lease = lease WHERE state = 'QUEUED'`)
	if x, r := e.start(t, e.admin, in, nil); x == nil {
		t.Fatalf("start 3 of 3 a day: %s", r.Raw)
	}
	e.exec(t, `UPDATE audit_exports SET state = 'SUCCEEDED', ended_lease = lease WHERE state = 'QUEUED'`)
	if _, r := e.start(t, e.admin, in, nil); r.Code() != "CONFLICT" || !strings.Contains(string(r.Raw), "started 3 audit exports") {
		t.Fatalf("start 4 of 3 a day: %s", r.Raw)
	}
}

// A file over AUDIT_EXPORT_MAX_BYTES fails the export at once (no retry)
// and leaves no file.
func TestAuditExportTooLargeFails(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	x := e.started(t, "CSV")
	err := e.worker(auditexport.Options{MaxBytes: 1000}).Work(t.Context(), e.job(t, x.ID, 1))
	if !errors.As(err, new(*river.JobCancelError)) {
		t.Fatalf("work: %v, want a cancellation (no retry)", err)
	}
	got, _ := e.get(t, e.admin, x.ID)
	if got.State != "FAILED" || got.Error == nil || !strings.Contains(*got.Error, "1000 bytes") || got.DownloadURL != nil {
		t.Fatalf("after the run: %+v", got)
	}
	if files := e.files(t); len(files) != 0 {
		t.Fatalf("files left: %v", files)
	}
}

// Expiry: past expiresAt the export is EXPIRED, its file deleted and its
// download refused.
func TestAuditExportExpiry(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	x := e.started(t, "CSV")
	if err := e.worker(auditexport.Options{}).Work(t.Context(), e.job(t, x.ID, 1)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := auditexport.Expire(t.Context(), e.DB, e.Blobs); err != nil || n != 0 {
		t.Fatalf("expire before its time: %d, %v", n, err)
	}
	if len(e.files(t)) != 1 {
		t.Fatalf("files: %v", e.files(t))
	}
	e.exec(t, `UPDATE audit_exports SET expires_at = now() - interval '1 second' WHERE id = $1`, x.ID)
	if n, _, err := auditexport.Expire(t.Context(), e.DB, e.Blobs); err != nil || n != 1 {
		t.Fatalf("expire: %d, %v", n, err)
	}
	if files := e.files(t); len(files) != 0 {
		t.Fatalf("files left after the expiry: %v", files)
	}
	got, _ := e.get(t, e.admin, x.ID)
	if got.State != "EXPIRED" || got.DownloadURL != nil {
		t.Fatalf("after the expiry: %+v", got)
	}
	if r := e.download(t, "/audit/exports/"+x.ID, e.admin.Token); r.Status != http.StatusConflict {
		t.Fatalf("download of an expired export: %d %s", r.Status, r.Raw)
	}
}

// Starts are bounded: one export queued or running per workspace, and
// store.DefaultAuditExportsPerDay a day, refused CONFLICT; a filter the sync export
// refuses, or with a huge value, is BAD_USER_INPUT.
func TestAuditExportStartBounds(t *testing.T) {
	t.Parallel()
	e := newExportEnv(t)
	in := map[string]any{"workspaceId": e.ws, "format": "NDJSON"}
	x, r := e.start(t, e.admin, in, nil)
	if x == nil {
		t.Fatalf("start: %s", r.Raw)
	}
	if _, r := e.start(t, e.owner, in, nil); r.Code() != "CONFLICT" || !strings.Contains(string(r.Raw), "queued or running") {
		t.Fatalf("a second start while one is queued: %s", r.Raw)
	}
	for i := 1; i < store.DefaultAuditExportsPerDay; i++ {
		e.exec(t, `UPDATE audit_exports SET state = 'SUCCEEDED', ended_lease = lease WHERE state = 'QUEUED'`)
		if x, r := e.start(t, e.admin, in, nil); x == nil {
			t.Fatalf("start %d: %s", i+1, r.Raw)
		}
	}
	e.exec(t, `UPDATE audit_exports SET state = 'SUCCEEDED', ended_lease = lease WHERE state = 'QUEUED'`)
	if _, r := e.start(t, e.admin, in, nil); r.Code() != "CONFLICT" || !strings.Contains(string(r.Raw), "24 hours") {
		t.Fatalf("start %d in a day: %s", store.DefaultAuditExportsPerDay+1, r.Raw)
	}
	// Another workspace is not concerned.
	if x, r := e.start(t, e.stranger, map[string]any{"workspaceId": e.other, "format": "CSV"}, nil); x == nil {
		t.Fatalf("another workspace's start: %s", r.Raw)
	}
	actions := make([]string, store.MaxAuditFilterActions+1)
	for i := range actions {
		actions[i] = "task.a" + uuidFor(i)
	}
	for name, f := range map[string]map[string]any{
		"too many actions": {"actions": actions},
		"a huge entityId":  {"entityId": strings.Repeat("a", 5000)},
		"a huge action":    {"actions": []string{strings.Repeat("a", 300)}},
		"a bad pattern":    {"actions": []string{"*.created"}},
	} {
		if _, r := e.start(t, e.stranger, map[string]any{"workspaceId": e.other, "format": "CSV", "filter": f}, nil); r.Code() != "BAD_USER_INPUT" {
			t.Fatalf("%s: %.300s", name, r.Raw)
		}
	}
}

// Starting an export costs 500 points of the starter's budget, once; the
// download is charged as an attachment's.
func TestAuditExportStartIsCharged(t *testing.T) {
	t.Parallel()
	lim := budgetLimiter(t, ratelimit.Config{Points: 100000, Window: 1000 * time.Hour})
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	before := left(t, e.Env, e.admin)
	r := e.Post(t, e.admin.Token, `mutation($ws: ID!) { startAuditExport(input: {workspaceId: $ws, format: CSV}) { id } }`,
		map[string]any{"ws": e.ws})
	if len(r.Body.Errors) > 0 {
		t.Fatalf("start: %s", r.Raw)
	}
	// left's own query costs 1; the mutation 500 and its selection 1 (id is free).
	if cost := before - left(t, e.Env, e.admin) - 1; cost < 500 || cost > 502 {
		t.Fatalf("the start cost %d points, want 500 and the selection's", cost)
	}
}
