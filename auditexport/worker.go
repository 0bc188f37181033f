package auditexport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/store"
)

// Defaults of Options.
const (
	// DefaultWorkers is AUDIT_EXPORT_WORKERS's default: exports one instance
	// writes at once.
	DefaultWorkers = 2
	// DefaultTTL is AUDIT_EXPORT_TTL's default: how long a finished
	// export's file is kept.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxBytes is AUDIT_EXPORT_MAX_BYTES's default: 1 GiB.
	DefaultMaxBytes = 1 << 30
	// DefaultTimeout is AUDIT_EXPORT_TIMEOUT's default: the bound of one
	// run of an export's job.
	DefaultTimeout = time.Hour
)

// Options configure the audit export jobs of an instance.
type Options struct {
	DB    *store.DB
	Blobs *blobs.Store
	Log   *slog.Logger
	// Workers is how many exports the instance writes at once
	// (AUDIT_EXPORT_WORKERS); 0 means DefaultWorkers.
	Workers int
	// TTL is how long a finished export is kept (AUDIT_EXPORT_TTL); 0 means
	// DefaultTTL.
	TTL time.Duration
	// MaxBytes bounds one export's file (AUDIT_EXPORT_MAX_BYTES): an export
	// that would write more fails; 0 means DefaultMaxBytes.
	MaxBytes int64
	// Timeout bounds one run (AUDIT_EXPORT_TIMEOUT); 0 means DefaultTimeout.
	Timeout time.Duration
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// ExpiryInterval is how often the expiry job runs for a TTL: a quarter of
// it, between 1 second and 5 minutes.
func ExpiryInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/4, time.Second), 5*time.Minute)
}

// Jobs are the River registrations of audit exports, for the instance's
// River client (webhook.Start's, which works every kind of job of the
// database: its leader's maintenance must know them all).
type Jobs struct {
	// Register adds the workers: an export's, and the expiry's.
	Register func(*river.Workers)
	// Queues is the audit exports queue, with Options.Workers workers.
	Queues map[string]river.QueueConfig
	// Periodic is the expiry job, every ExpiryInterval(TTL).
	Periodic []*river.PeriodicJob
}

// New returns the jobs of o.
func New(o Options) Jobs {
	o.defaults()
	w := &Worker{o: o}
	return Jobs{
		Register: func(ws *river.Workers) {
			river.AddWorker(ws, w)
			river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, _ *river.Job[expiryArgs]) error {
				_, err := Expire(ctx, o.DB, o.Blobs)
				if err != nil && ctx.Err() == nil {
					o.Log.ErrorContext(ctx, "audit export expiry", "err", err)
				}
				return err
			}))
		},
		Queues: map[string]river.QueueConfig{store.AuditExportQueue: {MaxWorkers: o.Workers}},
		Periodic: []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(ExpiryInterval(o.TTL)),
			func() (river.JobArgs, *river.InsertOpts) { return expiryArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})},
	}
}

// NewWorker returns the worker of export jobs of o, for tests that work a
// job by hand.
func NewWorker(o Options) *Worker {
	o.defaults()
	return &Worker{o: o}
}

// expiryArgs is the periodic job of the expiry.
type expiryArgs struct{}

// Kind is the job's kind in river_job.
func (expiryArgs) Kind() string { return "audit_export_expiry" }

// InsertOpts put the expiry in the audit exports queue, once at a time.
func (expiryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: store.AuditExportQueue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Expire ends the exports due (store.ExpireAuditExports) a batch at a time
// and deletes their files, and returns how many it expired. An object whose
// deletion fails is left to the blob sweeper (the database has forgotten it).
func Expire(ctx context.Context, db *store.DB, bs *blobs.Store) (int, error) {
	const batch = 500
	total := 0
	for {
		keys, n, err := db.ExpireAuditExports(ctx, batch)
		total += n
		if err != nil {
			return total, err
		}
		for _, k := range keys {
			if err := bs.Delete(ctx, k); err != nil {
				return total, fmt.Errorf("audit export expiry: delete %s: %w", k, err)
			}
		}
		if len(keys) < batch && n < batch {
			return total, nil
		}
	}
}

// Worker writes an export's file, one run per River job run.
type Worker struct {
	river.WorkerDefaults[store.AuditExportArgs]
	o Options
}

// Timeout is River's bound on a run (Options.Timeout); River's rescuer
// leaves the job alone for as long, so a run of an instance that died is
// started again that long after it began.
func (w *Worker) Timeout(*river.Job[store.AuditExportArgs]) time.Duration { return w.o.Timeout }

// ObjectKey is the blob store's object of an export's file: one per export,
// which every run overwrites.
func ObjectKey(exportID string) string { return "audit-exports/" + exportID }

// errTooLarge ends an export whose file would be over Options.MaxBytes.
var errTooLarge = errors.New("auditexport: the file is over its bound")

// Work runs the export: it marks it RUNNING (again, for a retry: it starts
// over), reads its events as the sync export does (store.EachAuditEvent, as
// its starter: the access rule is checked again), writes them to the blob
// store's object ObjectKey (which appears only when whole: a run cut short
// leaves none, or the previous one, never served), and marks it SUCCEEDED.
// A run that fails for a reason that may pass (the database, the blob store,
// a crash) is retried by River, up to store.AuditExportMaxAttempts runs; the
// last one's failure, or one that will not pass (the starter may no longer
// read the log, the file over its bound), marks the export FAILED.
func (w *Worker) Work(ctx context.Context, job *river.Job[store.AuditExportArgs]) error {
	id := job.Args.ExportID
	key := ObjectKey(id)
	run, err := w.o.DB.BeginAuditExport(ctx, id, key)
	if errors.Is(err, store.ErrAuditExportGone) {
		return nil
	}
	if err != nil {
		return err
	}
	events, size, err := w.write(ctx, run, key)
	if err == nil {
		err = w.o.DB.FinishAuditExport(ctx, id, events, size, w.o.TTL)
		if errors.Is(err, store.ErrAuditExportGone) {
			// Expired or deleted meanwhile: the database knows the file no more.
			w.remove(ctx, key)
			return nil
		}
		return err
	}
	message, final := failure(err, w.o.MaxBytes)
	if !final && job.Attempt < job.MaxAttempts {
		return err // River runs it again; the next run starts over
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	k, ferr := w.o.DB.FailAuditExport(fctx, id, message, w.o.TTL)
	if ferr != nil {
		return errors.Join(err, ferr)
	}
	if k != "" {
		w.remove(fctx, k)
	}
	return river.JobCancel(err)
}

// failure is the message an export's admins read for err, and whether
// another run would fail the same way.
func failure(err error, maxBytes int64) (string, bool) {
	switch {
	case errors.Is(err, errTooLarge):
		return fmt.Sprintf("the file would be over %d bytes: narrow the filter (since, until, actions)", maxBytes), true
	case errors.Is(err, errNoStarter):
		return "the user who started the export no longer exists", true
	}
	switch errs.CodeOf(err) {
	case errs.CodeNotFound, errs.CodeForbidden, errs.CodeUnauthenticated:
		return "the user who started the export may no longer read the workspace's audit log", true
	case errs.CodeBadUserInput:
		return "the filter is refused: " + err.Error(), true
	}
	return "the export failed; start it again", false
}

// errNoStarter ends an export whose starter's account is gone.
var errNoStarter = errors.New("auditexport: the starter no longer exists")

// remove deletes an object the database no longer knows; a failure is left
// to the blob sweeper.
func (w *Worker) remove(ctx context.Context, key string) {
	if err := w.o.Blobs.Delete(context.WithoutCancel(ctx), key); err != nil {
		w.o.Log.WarnContext(ctx, "audit export: could not delete a file; the blob sweeper will", "key", key, "err", err)
	}
}

// write writes the export's file and returns how many events and bytes it
// holds. On an error the object is not written (the writer is aborted).
func (w *Worker) write(ctx context.Context, run *store.AuditExportRun, key string) (events, size int64, err error) {
	if run.Starter == nil {
		return 0, 0, errNoStarter
	}
	format := string(run.Export.Format)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := w.o.Blobs.NewWriter(wctx, key, contentType(format))
	if err != nil {
		return 0, 0, fmt.Errorf("auditexport: write %s: %w", key, err)
	}
	cw := &countingWriter{w: bw, max: w.o.MaxBytes}
	enc := NewEncoder(cw, format)
	err = w.o.DB.EachAuditEvent(ctx, run.Starter, run.Export.WorkspaceID, run.Filter, nil, nil, func(e *store.AuditEvent) error {
		events++
		return enc.Write(e)
	})
	if err == nil {
		err = enc.Flush()
	}
	if err != nil {
		cancel() // aborts the write: no object is made
		_ = bw.Close()
		return 0, 0, err
	}
	if err := bw.Close(); err != nil {
		return 0, 0, fmt.Errorf("auditexport: write %s: %w", key, err)
	}
	return events, cw.n, nil
}

// contentType is the Content-Type of a file in format.
func contentType(format string) string {
	if format == string(store.AuditExportCSV) {
		return "text/csv; charset=utf-8"
	}
	return "application/x-ndjson"
}

// countingWriter counts what goes through it and refuses to go past max.
type countingWriter struct {
	w   io.Writer
	n   int64
	max int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		return 0, errTooLarge
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
