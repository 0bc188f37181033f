package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"taskflow/audit"
	"taskflow/errs"
)

// Asynchronous audit exports (startAuditExport): a row of audit_exports
// (migration 0018) and a River job (AuditExportArgs) inserted with it in the
// unit of work that starts it; the job (package auditexport) writes the file
// to the blob store and records the outcome here; the expiry sweep
// (ExpireAuditExports) forgets the files of exports past their expiry.

// AuditExportQueue is the River queue of audit export jobs.
const AuditExportQueue = "audit_exports"

// AuditExportMaxAttempts is the number of runs of an export's job: a run
// that fails (a crash, a blob store error) starts the export over.
const AuditExportMaxAttempts = 3

// DefaultAuditExportsPerDay is AUDIT_EXPORT_PER_DAY's default: the most
// exports a workspace may start in 24 hours. With few queued or running at
// a time and every file at most auditexport's MaxBytes, it bounds the bytes
// a workspace's exports hold.
const DefaultAuditExportsPerDay = 10

// DefaultAuditExportsAtOnce is AUDIT_EXPORT_AT_ONCE's default: the most
// exports of a workspace queued or running at a time.
const DefaultAuditExportsAtOnce = 1

// AuditExportLimits bound the exports a workspace starts (DB.AuditExports).
type AuditExportLimits struct {
	// PerDay is the most a workspace starts in 24 hours
	// (AUDIT_EXPORT_PER_DAY); 0 means DefaultAuditExportsPerDay.
	PerDay int
	// AtOnce is the most of a workspace queued or running at a time
	// (AUDIT_EXPORT_AT_ONCE); 0 means DefaultAuditExportsAtOnce.
	AtOnce int
}

// withDefaults returns l with its zero values replaced by the defaults.
func (l AuditExportLimits) withDefaults() AuditExportLimits {
	if l.PerDay <= 0 {
		l.PerDay = DefaultAuditExportsPerDay
	}
	if l.AtOnce <= 0 {
		l.AtOnce = DefaultAuditExportsAtOnce
	}
	return l
}

// AuditExportStrandedAfter is when an export still QUEUED or RUNNING is
// taken for one whose job is gone (every run failed in a crash) and is
// marked FAILED by the sweep: longer than all its runs may take.
const AuditExportStrandedAfter = 12 * time.Hour

// AuditExportMaxTakeovers is how many times an export is taken over
// (TakeOverAuditExports): an export whose run stops stamping its heartbeat
// once more is marked FAILED instead of given another run. Runs that all
// hang (a blob store that stopped answering) or all kill their instance
// (an export that exhausts its memory) end so within about
// AuditExportMaxTakeovers+1 times AUDIT_EXPORT_TAKEOVER_AFTER and a quarter
// of it (12½ minutes by default), not after AuditExportStrandedAfter.
const AuditExportMaxTakeovers = 4

// AuditExportRetention is how long an EXPIRED export's row is kept (its
// file is deleted when it expires).
const AuditExportRetention = 30 * 24 * time.Hour

// maxAuditExportFilterString bounds each string of an export's filter, in
// bytes: the filter is stored with the export.
const maxAuditExportFilterString = 256

// AuditExportState is where an export stands.
type AuditExportState string

// Export states.
const (
	// AuditExportQueued: its job waits for a worker (or for the workspace's
	// running export to end).
	AuditExportQueued AuditExportState = "QUEUED"
	// AuditExportRunning: its job writes the file.
	AuditExportRunning AuditExportState = "RUNNING"
	// AuditExportSucceeded: the file can be downloaded until it expires.
	AuditExportSucceeded AuditExportState = "SUCCEEDED"
	// AuditExportFailed: every run failed; error says why.
	AuditExportFailed AuditExportState = "FAILED"
	// AuditExportExpired: past its expiry; the file is deleted.
	AuditExportExpired AuditExportState = "EXPIRED"
)

// IsValid reports whether s is a known state.
func (s AuditExportState) IsValid() bool {
	return enumValid(s, AuditExportQueued, AuditExportRunning, AuditExportSucceeded, AuditExportFailed, AuditExportExpired)
}

// UnmarshalGQL implements graphql.Unmarshaler.
func (s *AuditExportState) UnmarshalGQL(v any) error { return unmarshalEnum(s, v, "AuditExportState") }

// MarshalGQL implements graphql.Marshaler.
func (s AuditExportState) MarshalGQL(w io.Writer) { io.WriteString(w, strconv.Quote(string(s))) }

// AuditExportFormat is the format of an export's file.
type AuditExportFormat string

// Export formats: those of GET /audit/export.
const (
	// AuditExportNDJSON is one JSON object per line.
	AuditExportNDJSON AuditExportFormat = "NDJSON"
	// AuditExportCSV is CSV with a header line.
	AuditExportCSV AuditExportFormat = "CSV"
)

// IsValid reports whether f is a known format.
func (f AuditExportFormat) IsValid() bool { return enumValid(f, AuditExportNDJSON, AuditExportCSV) }

// UnmarshalGQL implements graphql.Unmarshaler.
func (f *AuditExportFormat) UnmarshalGQL(v any) error {
	return unmarshalEnum(f, v, "AuditExportFormat")
}

// MarshalGQL implements graphql.Marshaler.
func (f AuditExportFormat) MarshalGQL(w io.Writer) { io.WriteString(w, strconv.Quote(string(f))) }

// AuditExport is an asynchronous export of a workspace's audit log.
type AuditExport struct {
	ID            string            `json:"id" audit:"track"`
	WorkspaceID   string            `json:"workspaceId" audit:"track"`
	CreatedByID   *string           `json:"createdById" audit:"track"`
	Format        AuditExportFormat `json:"format" audit:"track"`
	State         AuditExportState  `json:"state" audit:"track"`
	EventsWritten int               `json:"eventsWritten" audit:"ignore"`
	Bytes         int               `json:"bytes" audit:"ignore"`
	Error         *string           `json:"error" audit:"ignore"`
	CreatedAt     time.Time         `json:"createdAt" audit:"ignore"`
	StartedAt     *time.Time        `json:"startedAt" audit:"ignore"`
	FinishedAt    *time.Time        `json:"finishedAt" audit:"ignore"`
	ExpiresAt     *time.Time        `json:"expiresAt" audit:"ignore"`
	// ObjectKey is the blob store's object of the file while the database
	// knows it ("" before the first run and once expired); it is served
	// only when State is SUCCEEDED.
	ObjectKey string `json:"objectKey" audit:"ignore"`
}

// AuditExportConnection is a page of exports.
type (
	AuditExportConnection = Connection[AuditExport]
	// AuditExportEdge is an export with its cursor.
	AuditExportEdge = Edge[AuditExport]
)

// DefaultAuditExportPageSize is the first of an export list when none is given.
const DefaultAuditExportPageSize = 20

// AuditExportInput is what startAuditExport asks for.
type AuditExportInput struct {
	WorkspaceID string
	Format      AuditExportFormat
	Filter      AuditFilter
}

// AuditExportArgs is the River job of one export.
type AuditExportArgs struct {
	ExportID string `json:"export_id"`
	// Run is the export's run this job works (audit_exports.run): 1 for the
	// job of its start, one more for each takeover (TakeOverAuditExports).
	// 0, in jobs inserted before runs were numbered, means 1.
	Run int `json:"run,omitempty"`
}

// Kind is the job's kind in river_job.
func (AuditExportArgs) Kind() string { return "audit_export" }

// InsertOpts are the job's insert options: the audit exports queue, and
// AuditExportMaxAttempts runs.
func (AuditExportArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: AuditExportQueue, MaxAttempts: AuditExportMaxAttempts}
}

// auditExportColumns is the column list scanned by scanAuditExport.
const auditExportColumns = `x.id, x.workspace_id, x.created_by, x.format, x.state, x.events_written, x.bytes, x.error,
	x.created_at, x.started_at, x.finished_at, x.expires_at, coalesce(x.object_key, '')`

// scanAuditExport scans the columns of auditExportColumns, then extra.
func scanAuditExport(row pgx.Row, extra ...any) (*AuditExport, error) {
	var x AuditExport
	if err := row.Scan(append([]any{&x.ID, &x.WorkspaceID, &x.CreatedByID, &x.Format, &x.State, &x.EventsWritten,
		&x.Bytes, &x.Error, &x.CreatedAt, &x.StartedAt, &x.FinishedAt, &x.ExpiresAt, &x.ObjectKey}, extra...)...); err != nil {
		return nil, err
	}
	return &x, nil
}

// auditExportRefusals are StartAuditExport's refusals under l.
func auditExportRefusals(l AuditExportLimits) refusals {
	busy := errs.Errorf(errs.CodeConflict,
		"an audit export of this workspace is queued or running: wait for it to end (auditExport(id).state) before starting another")
	if l.AtOnce > 1 {
		busy = errs.Errorf(errs.CodeConflict,
			"%d audit exports of this workspace are queued or running, the most it may at once: wait for one to end (auditExport(id).state) before starting another",
			l.AtOnce)
	}
	return refusals{"busy": busy, "per_day": errs.Errorf(errs.CodeConflict,
		"this workspace started %d audit exports in the last 24 hours, the most it may: download one of them, or use GET /audit/export",
		l.PerDay)}
}

// auditExportFilter checks the filter of an export: the sync export's rules
// (AuditFilter.normalized) and at most maxAuditExportFilterString bytes in
// each string. It returns the filter normalized, or BAD_USER_INPUT.
func auditExportFilter(f AuditFilter) (AuditFilter, error) {
	for _, s := range append(append([]string(nil), f.Actions...), deref(f.ActorID), deref(f.EntityType), deref(f.EntityID)) {
		if len(s) > maxAuditExportFilterString {
			return f, errs.Errorf(errs.CodeBadUserInput, "filter: a value is at most %d characters", maxAuditExportFilterString)
		}
	}
	return f.normalized()
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// StartAuditExport starts an export of the workspace's audit log: in one
// unit of work, the export (QUEUED), its event audit.export_started, the
// idempotency record of the caller's key if any, and its River job, so that
// a crash loses or duplicates nothing. The access rule is the sync export's
// (OWNER or ADMIN). It returns UNAUTHENTICATED for no actor, NOT_FOUND for a
// workspace that does not exist or of which actor is not a member,
// FORBIDDEN for a MEMBER or VIEWER, BAD_USER_INPUT for an unknown format or
// a filter the sync export refuses (or with a string over 256 bytes), and
// CONFLICT when the workspace has db.AuditExportLimits.AtOnce exports
// queued or running, or started db.AuditExportLimits.PerDay in the last 24
// hours.
func (db *DB) StartAuditExport(ctx context.Context, actor *User, in AuditExportInput) (*AuditExport, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !in.Format.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "format must be NDJSON or CSV")
	}
	f, err := auditExportFilter(in.Filter)
	if err != nil {
		return nil, err
	}
	if !validID(in.WorkspaceID) {
		return nil, notFound("workspace")
	}
	filter, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("audit export filter: %w", err)
	}
	limits := db.AuditExportLimits.withDefaults()
	now := stamp(time.Now())
	x := &AuditExport{ID: newID(), WorkspaceID: mustCanonical(in.WorkspaceID), CreatedByID: &actor.ID, Format: in.Format,
		State: AuditExportQueued, CreatedAt: now}
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		// The workspace locked with the role checked (NOT_FOUND, FORBIDDEN),
		// then, in a statement whose snapshot follows the lock, the bounds on
		// starts, and the export: one round trip with the key's claim;
		// River's insert (and its notification); the event and COMMIT.
		u := unitOfWorkFrom(ctx)
		u.checkParent(parentWorkspace.locked("FOR NO KEY UPDATE"), x.WorkspaceID, actor, RoleAdmin, auditReadAction, "", nil)
		u.check(`SELECT taskflow_check(CASE
				WHEN (SELECT count(*) FROM (SELECT 1 FROM audit_exports WHERE workspace_id = $1 AND state IN ('QUEUED', 'RUNNING')
					LIMIT $3::int) a) >= $3::int THEN 'busy'
				WHEN (SELECT count(*) FROM (SELECT 1 FROM audit_exports WHERE workspace_id = $1 AND created_at > now() - interval '24 hours'
					LIMIT $2::int) d) >= $2::int THEN 'per_day' END)`, []any{x.WorkspaceID, limits.PerDay, limits.AtOnce},
			auditExportRefusals(limits))
		if err := db.exec(ctx, tx, "start audit export", `INSERT INTO audit_exports
				(id, workspace_id, created_by, format, filter, created_at)
			SELECT $1, $2, $3, $4, $5, $6 WHERE taskflow_ok()`,
			[]any{x.ID, x.WorkspaceID, actor.ID, string(x.Format), filter, now}, 1); err != nil {
			return err
		}
		if err := db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &x.WorkspaceID, ActorID: &actor.ID,
			Action: "audit.export_started", EntityID: x.ID,
			Metadata: map[string]any{"id": x.ID, "format": string(x.Format), "filter": auditFilterMetadata(f)}}); err != nil {
			return err
		}
		ptx, err := pgxTxOf(ctx, tx)
		if err != nil {
			return err
		}
		c, err := db.riverInserter()
		if err != nil {
			return fmt.Errorf("river client: %w", err)
		}
		if _, err := c.InsertTx(ctx, ptx, AuditExportArgs{ExportID: x.ID, Run: 1}, nil); err != nil {
			return fmt.Errorf("start audit export: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// auditFilterMetadata is the filter as audit.export_started records it: the
// set fields, named as in AuditEventFilter.
func auditFilterMetadata(f AuditFilter) map[string]any {
	m := map[string]any{}
	if len(f.Actions) > 0 {
		m["actions"] = f.Actions
	}
	for k, p := range map[string]*string{"actorId": f.ActorID, "entityType": f.EntityType, "entityId": f.EntityID} {
		if p != nil {
			m[k] = *p
		}
	}
	for k, t := range map[string]*time.Time{"since": f.Since, "until": f.Until} {
		if t != nil {
			m[k] = t.Format(time.RFC3339Nano)
		}
	}
	return m
}

// AuditExport returns the export with this id to an OWNER or ADMIN of its
// workspace. It returns UNAUTHENTICATED for no viewer, NOT_FOUND when the
// export does not exist or the viewer is not a member of its workspace,
// and FORBIDDEN for a MEMBER or VIEWER.
func (db *DB) AuditExport(ctx context.Context, viewer *User, id string) (*AuditExport, error) {
	if viewer == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !validID(id) {
		return nil, notFound("audit export")
	}
	x, err := scanAuditExport(db.q(ctx).QueryRow(ctx, `SELECT `+auditExportColumns+` FROM audit_exports x WHERE x.id = $1`,
		mustCanonical(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("audit export")
	}
	if err != nil {
		return nil, fmt.Errorf("audit export: %w", err)
	}
	if _, err := db.requireRole(ctx, x.WorkspaceID, viewer, RoleAdmin, "audit export", auditReadAction); err != nil {
		return nil, err
	}
	return x, nil
}

// AuditExports returns a page of the workspace's exports, newest first, to
// an OWNER or ADMIN. Errors: as AuditExport's (NOT_FOUND naming the
// workspace), and BAD_USER_INPUT for a bad first or after.
func (db *DB) AuditExports(ctx context.Context, viewer *User, workspaceID string, first *int, after *string) (*AuditExportConnection, error) {
	scope := "audit-exports:" + strings.ToLower(workspaceID)
	page, err := NewPage(first, DefaultAuditExportPageSize, after, scope)
	if err != nil {
		return nil, err
	}
	if err := db.requireAuditReader(ctx, workspaceID, viewer); err != nil {
		return nil, err
	}
	args := []any{mustCanonical(workspaceID), page.First + 1}
	where := ""
	if page.After != nil {
		args = append(args, page.After.At, page.After.ID)
		where = ` AND (x.created_at, x.id) < ($3, $4)`
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+auditExportColumns+` FROM audit_exports x
		WHERE x.workspace_id = $1`+where+` ORDER BY x.created_at DESC, x.id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("audit exports: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*AuditExport, error) { return scanAuditExport(r) })
	if err != nil {
		return nil, fmt.Errorf("audit exports: %w", err)
	}
	return connection(items, page, scope, func(x *AuditExport) (time.Time, string) { return x.CreatedAt, x.ID }), nil
}

// ErrAuditExportGone is the answer of BeginAuditExport and of a run's
// stamps for an export that is gone (its workspace deleted), ended already,
// or taken over by another run (TakeOverAuditExports): the run has nothing
// more to do, and must write nothing.
var ErrAuditExportGone = errors.New("store: the audit export is gone, ended, or taken over")

// AuditExportRun is what a run of an export's job needs: the export, its
// filter, its starter (nil when the user no longer exists), and the run's
// lease, which its stamps name (HeartbeatAuditExport, FinishAuditExport,
// FailAuditExport).
type AuditExportRun struct {
	Export  *AuditExport
	Filter  AuditFilter
	Starter *User
	Lease   int64
}

// BeginAuditExport marks the export RUNNING (again, for a retried run: its
// counts start over) for the job of run (AuditExportArgs.Run), with key as
// its file's object, named before a byte of it is written so that the blob
// sweeper spares it, stamps its heartbeat, and returns the run with a new
// lease: a run begun before, of this job or another, stamps nothing more.
// It returns ErrAuditExportGone when the export is neither QUEUED nor
// RUNNING, or belongs to another run (taken over).
func (db *DB) BeginAuditExport(ctx context.Context, id string, run int, key string) (*AuditExportRun, error) {
	var filter []byte
	var lease int64
	x, err := scanAuditExport(db.Pool.QueryRow(ctx, `UPDATE audit_exports x SET state = 'RUNNING', started_at = now(),
			events_written = 0, bytes = 0, error = NULL, object_key = $2, lease = x.lease + 1, heartbeat_at = now()
		WHERE x.id = $1 AND x.run = $3 AND x.state IN ('QUEUED', 'RUNNING') RETURNING `+auditExportColumns+`, x.filter, x.lease`,
		id, key, max(run, 1)), &filter, &lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrAuditExportGone
	}
	if err != nil {
		return nil, fmt.Errorf("begin audit export: %w", err)
	}
	r := &AuditExportRun{Export: x, Lease: lease}
	if err := json.Unmarshal(filter, &r.Filter); err != nil {
		return nil, fmt.Errorf("begin audit export: filter: %w", err)
	}
	if x.CreatedByID != nil {
		users, err := db.UsersByIDs(ctx, []string{*x.CreatedByID})
		if err != nil {
			return nil, fmt.Errorf("begin audit export: %w", err)
		}
		r.Starter = users[*x.CreatedByID]
	}
	return r, nil
}

// HeartbeatAuditExport stamps the heartbeat of the export's run of this
// lease: the run is alive. It returns ErrAuditExportGone when the lease is no
// longer the export's (taken over, ended, or gone): the run must stop and
// write nothing.
func (db *DB) HeartbeatAuditExport(ctx context.Context, id string, lease int64) error {
	tag, err := db.Pool.Exec(ctx, `UPDATE audit_exports SET heartbeat_at = now()
		WHERE id = $1 AND lease = $2 AND state = 'RUNNING'`, id, lease)
	if err != nil {
		return fmt.Errorf("audit export heartbeat: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrAuditExportGone
	}
	return nil
}

// FinishAuditExport marks the export SUCCEEDED with its counts, expiring
// ttl from now, when it is RUNNING under this lease: from then on its file
// is served. It returns ErrAuditExportGone when it is not (expired
// meanwhile, its workspace deleted, or taken over: the caller deletes its
// file, which the database does not know). The statement names the lease
// in ended_lease too: the database ends an export only under its current
// lease (migration 0020), whatever the statement's WHERE, so that a run of
// an older server, which names none, cannot end an export it lost.
func (db *DB) FinishAuditExport(ctx context.Context, id string, lease, events, bytes int64, ttl time.Duration) error {
	tag, err := db.Pool.Exec(ctx, `UPDATE audit_exports SET state = 'SUCCEEDED', events_written = $2, bytes = $3,
			finished_at = now(), expires_at = now() + $4::interval, heartbeat_at = NULL, ended_lease = $5
		WHERE id = $1 AND lease = $5 AND state = 'RUNNING'`, id, events, bytes, ttl, lease)
	if err != nil {
		return fmt.Errorf("finish audit export: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrAuditExportGone
	}
	return nil
}

// FailAuditExport marks the export RUNNING under this lease FAILED with
// message (shown to its workspace's admins: no internal detail), expiring
// ttl from now, and forgets its object, whose key it returns ("" for none)
// for the caller to delete. An export that ended already, or that another
// run took over, is left as it is: ErrAuditExportGone. The lease is named
// as FinishAuditExport names it.
func (db *DB) FailAuditExport(ctx context.Context, id string, lease int64, message string, ttl time.Duration) (string, error) {
	var key string
	err := db.Pool.QueryRow(ctx, `UPDATE audit_exports x SET state = 'FAILED', error = $2, finished_at = now(),
			expires_at = now() + $3::interval, object_key = NULL, heartbeat_at = NULL, ended_lease = $4
		FROM (SELECT id, object_key FROM audit_exports WHERE id = $1 FOR UPDATE) old
		WHERE x.id = old.id AND x.lease = $4 AND x.state = 'RUNNING' RETURNING coalesce(old.object_key, '')`,
		id, message, ttl, lease).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrAuditExportGone
	}
	if err != nil {
		return "", fmt.Errorf("fail audit export: %w", err)
	}
	return key, nil
}

// auditExportHungMessage is the error of an export failed after
// AuditExportMaxTakeovers takeovers, shown to its workspace's admins.
var auditExportHungMessage = fmt.Sprintf("%d runs of the export stopped making progress: start it again, with a narrower filter (since, until, actions) if it is large",
	AuditExportMaxTakeovers+1)

// TakenOverAuditExport is an export TakeOverAuditExports gave to a new run.
type TakenOverAuditExport struct {
	ID string
	// Run is the new run, whose job was inserted.
	Run int
	// ObjectKey is the file of the run taken over ("" for none), which the
	// database no longer knows, for the caller to delete.
	ObjectKey string
	// Failed is set for an export taken over AuditExportMaxTakeovers times
	// already: it is FAILED, not given a new run (Run is its last).
	Failed bool
}

// TakeOverAuditExports gives, at most limit at a time, the exports RUNNING
// whose heartbeat is older than staleAfter (their instance died, or their
// run is stuck) to a new run: in one transaction, each is QUEUED again
// under the next run number and a new lease, its object forgotten, and the
// new run's River job inserted. The run taken over, if it is in fact alive,
// learns it at its next stamp (ErrAuditExportGone) and stops; its job, if
// River runs it again, finds the export gone. An export taken over
// AuditExportMaxTakeovers times already is marked FAILED instead (expiring
// ttl from now, its object forgotten), with no new run. It returns the
// exports taken over and failed, each with the object to delete.
func (db *DB) TakeOverAuditExports(ctx context.Context, staleAfter time.Duration, limit int, ttl time.Duration) ([]TakenOverAuditExport, error) {
	var out []TakenOverAuditExport
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		// run counts the takeovers: 1 + how many there were. A FAILED end
		// names the lease it ends (migration 0020's fence).
		rows, err := tx.Query(ctx, `WITH stale AS (
				SELECT id, object_key, run > $3 AS failed FROM audit_exports
				WHERE state = 'RUNNING' AND heartbeat_at < now() - $1::interval
				ORDER BY heartbeat_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			UPDATE audit_exports x SET heartbeat_at = NULL, object_key = NULL, events_written = 0, bytes = 0,
				state = CASE WHEN stale.failed THEN 'FAILED' ELSE 'QUEUED' END,
				run = CASE WHEN stale.failed THEN x.run ELSE x.run + 1 END,
				lease = CASE WHEN stale.failed THEN x.lease ELSE x.lease + 1 END,
				ended_lease = CASE WHEN stale.failed THEN x.lease ELSE x.ended_lease END,
				error = CASE WHEN stale.failed THEN $4 ELSE x.error END,
				finished_at = CASE WHEN stale.failed THEN now() ELSE x.finished_at END,
				expires_at = CASE WHEN stale.failed THEN now() + $5::interval ELSE x.expires_at END
			FROM stale WHERE x.id = stale.id RETURNING x.id, x.run, coalesce(stale.object_key, ''), stale.failed`,
			staleAfter, limit, AuditExportMaxTakeovers, auditExportHungMessage, ttl)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TakenOverAuditExport, error) {
			var t TakenOverAuditExport
			return t, r.Scan(&t.ID, &t.Run, &t.ObjectKey, &t.Failed)
		})
		if err != nil {
			return err
		}
		var params []river.InsertManyParams
		for _, t := range out {
			if !t.Failed {
				params = append(params, river.InsertManyParams{Args: AuditExportArgs{ExportID: t.ID, Run: t.Run}})
			}
		}
		if len(params) == 0 {
			return nil
		}
		_, err = db.insertJobs(ctx, tx, params)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("take over audit exports: %w", err)
	}
	return out, nil
}

// AuditExportCounts returns how many exports are QUEUED and RUNNING, of
// every workspace.
func (db *DB) AuditExportCounts(ctx context.Context) (queued, running int, err error) {
	err = db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'QUEUED'), count(*) FILTER (WHERE state = 'RUNNING')
		FROM audit_exports WHERE state IN ('QUEUED', 'RUNNING')`).Scan(&queued, &running)
	if err != nil {
		return 0, 0, fmt.Errorf("audit export counts: %w", err)
	}
	return queued, running, nil
}

// ExpireAuditExports ends, at most limit at a time, the exports past their
// expiry (SUCCEEDED or FAILED: EXPIRED, their object forgotten), those
// QUEUED or RUNNING for longer than AuditExportStrandedAfter (FAILED, their
// object forgotten), and deletes the rows EXPIRED for AuditExportRetention.
// It returns the keys of the objects forgotten, for the caller to delete
// (forgotten first: a crash before the deletion leaves an object nobody
// knows, which the blob sweeper deletes), how many exports it expired and
// how many it failed as stranded.
func (db *DB) ExpireAuditExports(ctx context.Context, limit int) (keys []string, expired, stranded int, err error) {
	rows, err := db.Pool.Query(ctx, `WITH due AS (
			SELECT id, object_key, CASE WHEN state IN ('SUCCEEDED', 'FAILED') THEN 'EXPIRED' ELSE 'FAILED' END AS next
			FROM audit_exports
			WHERE (state IN ('SUCCEEDED', 'FAILED') AND expires_at <= now())
				OR (state IN ('QUEUED', 'RUNNING') AND created_at <= now() - $2::interval)
			ORDER BY expires_at NULLS LAST LIMIT $1 FOR UPDATE SKIP LOCKED),
		gone AS (DELETE FROM audit_exports WHERE state = 'EXPIRED' AND expires_at <= now() - $3::interval)
		UPDATE audit_exports x SET state = due.next, object_key = NULL,
			error = CASE WHEN due.next = 'FAILED' THEN 'the export did not finish: start it again' ELSE x.error END,
			finished_at = coalesce(x.finished_at, now()), expires_at = coalesce(x.expires_at, now()),
			ended_lease = CASE WHEN due.next = 'FAILED' THEN x.lease ELSE x.ended_lease END
		FROM due WHERE x.id = due.id RETURNING due.next, coalesce(due.object_key, '')`,
		limit, AuditExportStrandedAfter, AuditExportRetention)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("expire audit exports: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var next, key string
		if err := rows.Scan(&next, &key); err != nil {
			return nil, 0, 0, fmt.Errorf("expire audit exports: %w", err)
		}
		if next == string(AuditExportExpired) {
			expired++
		} else {
			stranded++
		}
		if key != "" {
			keys = append(keys, key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("expire audit exports: %w", err)
	}
	return keys, expired, stranded, nil
}

// AuditExportForDownload returns the export with this id, for a download by
// userID: NOT_FOUND when it does not exist or userID is not a member of its
// workspace, FORBIDDEN for a MEMBER or VIEWER (AuditExport's rule), and
// CONFLICT when it is not SUCCEEDED (no file to serve, yet or any more).
func (db *DB) AuditExportForDownload(ctx context.Context, userID, id string) (*AuditExport, error) {
	x, err := db.AuditExport(ctx, &User{ID: userID}, id)
	if err != nil {
		return nil, err
	}
	if x.State != AuditExportSucceeded || x.ObjectKey == "" {
		return nil, errs.Errorf(errs.CodeConflict, "the audit export is %s: only a SUCCEEDED export has a file", x.State)
	}
	return x, nil
}
