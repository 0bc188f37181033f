package auditexport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	// DefaultTakeoverAfter is AUDIT_EXPORT_TAKEOVER_AFTER's default: how
	// long a run may go without stamping its heartbeat before another run
	// takes its export over.
	DefaultTakeoverAfter = 2 * time.Minute
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
	// TakeoverAfter is how long a run may go without stamping its heartbeat
	// (a run stamps it every TakeoverAfter/8 as it writes) before a new run
	// takes its export over (AUDIT_EXPORT_TAKEOVER_AFTER); the takeover pass
	// runs every TakeoverInterval(TakeoverAfter). 0 means
	// DefaultTakeoverAfter.
	TakeoverAfter time.Duration
	// Registerer registers the metrics (nil: they count, unregistered).
	Registerer prometheus.Registerer
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
	if o.TakeoverAfter <= 0 {
		o.TakeoverAfter = DefaultTakeoverAfter
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

// TakeoverInterval is how often the takeover pass runs for a
// TakeoverAfter: a quarter of it, at least a second. A run that died is
// taken over at most after + TakeoverInterval(after) after its last
// heartbeat.
func TakeoverInterval(after time.Duration) time.Duration {
	return max(after/4, time.Second)
}

// Jobs are the River registrations of audit exports, for the instance's
// River client (webhook.Start's, which works every kind of job of the
// database: its leader's maintenance must know them all).
type Jobs struct {
	// Register adds the workers: an export's, the expiry's and the
	// takeover's.
	Register func(*river.Workers)
	// Queues is the audit exports queue, with Options.Workers workers.
	Queues map[string]river.QueueConfig
	// Periodic are the expiry job, every ExpiryInterval(TTL), and the
	// takeover job, every TakeoverInterval(TakeoverAfter).
	Periodic []*river.PeriodicJob
}

// New returns the jobs of o.
func New(o Options) Jobs {
	w := NewWorker(o)
	o = w.o
	return Jobs{
		Register: func(ws *river.Workers) {
			river.AddWorker(ws, w)
			river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, _ *river.Job[expiryArgs]) error {
				_, err := w.Expire(ctx)
				return err
			}))
			river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, _ *river.Job[takeoverArgs]) error {
				_, err := w.TakeOver(ctx)
				return err
			}))
		},
		Queues: map[string]river.QueueConfig{store.AuditExportQueue: {MaxWorkers: o.Workers}},
		Periodic: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(ExpiryInterval(o.TTL)),
				func() (river.JobArgs, *river.InsertOpts) { return expiryArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(TakeoverInterval(o.TakeoverAfter)),
				func() (river.JobArgs, *river.InsertOpts) { return takeoverArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
		},
	}
}

// NewWorker returns the worker of export jobs of o, for tests that work a
// job by hand.
func NewWorker(o Options) *Worker {
	o.defaults()
	return &Worker{o: o, m: newMetrics(o.Registerer, o.DB)}
}

// expiryArgs is the periodic job of the expiry.
type expiryArgs struct{}

// Kind is the job's kind in river_job.
func (expiryArgs) Kind() string { return "audit_export_expiry" }

// InsertOpts put the expiry in the audit exports queue, once at a time.
func (expiryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: store.AuditExportQueue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// takeoverArgs is the periodic job of the takeover pass.
type takeoverArgs struct{}

// Kind is the job's kind in river_job.
func (takeoverArgs) Kind() string { return "audit_export_takeover" }

// InsertOpts put the takeover pass in the audit exports queue, once at a
// time.
func (takeoverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: store.AuditExportQueue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Expire is the expiry job's pass: Expire of the worker's database and blob
// store, logged and counted (the stranded exports it fails as failed; a
// failure at blobs.FailureLevel: the next pass runs on). It returns how many
// it expired.
func (w *Worker) Expire(ctx context.Context) (int, error) {
	n, stranded, err := Expire(ctx, w.o.DB, w.o.Blobs)
	w.m.finishes.WithLabelValues(outcomeExpired).Add(float64(n))
	w.m.finishes.WithLabelValues(outcomeFailed).Add(float64(stranded))
	if err != nil && ctx.Err() == nil {
		w.o.Log.Log(ctx, blobs.FailureLevel(err), "audit export expiry", "err", err)
	}
	return n, err
}

// TakeOver is the takeover job's pass: it gives the exports whose run has
// not stamped its heartbeat for Options.TakeoverAfter to a new run
// (store.TakeOverAuditExports), a batch at a time, deletes the files the
// runs taken over may have left, and returns how many it took over, logged
// and counted (a failure at blobs.FailureLevel). Those taken over store.AuditExportMaxTakeovers times already
// are failed instead, logged and counted as failed. An object whose
// deletion fails is left to the blob sweeper (the database has forgotten
// it).
func (w *Worker) TakeOver(ctx context.Context) (int, error) {
	n, failed, err := w.takeOver(ctx)
	w.m.finishes.WithLabelValues(outcomeTakenOver).Add(float64(n))
	w.m.finishes.WithLabelValues(outcomeFailed).Add(float64(failed))
	if n > 0 {
		w.o.Log.WarnContext(ctx, "audit exports taken over: their runs stopped stamping their heartbeat (an instance died, or its blob store hangs)",
			"exports", n, "after", w.o.TakeoverAfter.String())
	}
	if failed > 0 {
		w.o.Log.WarnContext(ctx, "audit exports failed: their runs stopped stamping their heartbeat once more after as many takeovers as an export has",
			"exports", failed, "takeovers", store.AuditExportMaxTakeovers, "after", w.o.TakeoverAfter.String())
	}
	if err != nil && ctx.Err() == nil {
		w.o.Log.Log(ctx, blobs.FailureLevel(err), "audit export takeover", "err", err)
	}
	return n, err
}

func (w *Worker) takeOver(ctx context.Context) (taken, failed int, err error) {
	err = drain(ctx, w.o.Blobs, "audit export takeover", 100, func(limit int) (int, []string, error) {
		done, err := w.o.DB.TakeOverAuditExports(ctx, w.o.TakeoverAfter, limit, w.o.TTL)
		var keys []string
		for _, t := range done {
			if t.Failed {
				failed++
			} else {
				taken++
			}
			if t.ObjectKey != "" {
				keys = append(keys, t.ObjectKey)
			}
		}
		return len(done), keys, err
	})
	return taken, failed, err
}

// Expire ends the exports due (store.ExpireAuditExports) a batch at a time
// and deletes their files, and returns how many it expired and how many it
// failed as stranded (QUEUED or RUNNING for store.AuditExportStrandedAfter).
// An object whose deletion fails is left to the blob sweeper (the database
// has forgotten it).
func Expire(ctx context.Context, db *store.DB, bs *blobs.Store) (expired, stranded int, err error) {
	err = drain(ctx, bs, "audit export expiry", 500, func(limit int) (int, []string, error) {
		keys, n, f, err := db.ExpireAuditExports(ctx, limit)
		expired, stranded = expired+n, stranded+f
		return n + f, keys, err
	})
	return expired, stranded, err
}

// drain runs a pass over exports a batch at a time: next handles at most
// batch of them and returns how many it handled and the objects it left
// them without (the database has forgotten them), which are deleted before
// the next batch. It ends at the first batch of fewer than batch, or at the
// first error: next's, or a deletion's (named after what, the pass), which
// leaves the object to the blob sweeper.
func drain(ctx context.Context, bs *blobs.Store, what string, batch int,
	next func(limit int) (handled int, keys []string, err error),
) error {
	for {
		n, keys, err := next(batch)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := bs.Delete(ctx, k); err != nil {
				return fmt.Errorf("%s: delete %s: %w", what, k, err)
			}
		}
		if n < batch {
			return nil
		}
	}
}

// Worker writes an export's file, one run per River job run.
type Worker struct {
	river.WorkerDefaults[store.AuditExportArgs]
	o Options
	m *metrics
}

// Timeout is River's bound on a run (Options.Timeout). River's rescuer
// leaves the job alone for as long; a run of an instance that died is taken
// over long before (Options.TakeoverAfter), and its job, when River runs it
// again, finds the export gone.
func (w *Worker) Timeout(*river.Job[store.AuditExportArgs]) time.Duration { return w.o.Timeout }

// ObjectKey is the blob store's object of an export's file as the attempt
// (River's) of its run (store.AuditExportArgs.Run) writes it: one per
// attempt, so that a run taken over while in fact alive, or a River attempt
// that outlived its timeout, never writes over the file of the run that
// owns the export. The database names the one served. Keys are flat (no
// directory per export, which a file:// store would keep once empty).
func ObjectKey(exportID string, run, attempt int) string {
	return fmt.Sprintf("audit-exports/%s.%d.%d", exportID, run, attempt)
}

// errTooLarge ends an export whose file would be over Options.MaxBytes.
var errTooLarge = errors.New("auditexport: the file is over its bound")

// Work runs the export: it marks it RUNNING (again, for a retry: it starts
// over) under a new lease, reads its events as the sync export does
// (store.EachAuditEvent, as its starter: the access rule is checked again),
// writes them to the blob store's object ObjectKey (which appears only when
// whole: a run cut short leaves none, or the previous one, never served),
// stamping its heartbeat every TakeoverAfter/8 as it goes, and marks it
// SUCCEEDED. A run that fails for a reason that may pass (the database, the
// blob store, a crash) is retried by River, up to
// store.AuditExportMaxAttempts runs; the last one's failure, or one that
// will not pass (the starter may no longer read the log, the file over its
// bound), marks the export FAILED. A run that learns at a stamp that its
// export was taken over (or ended) stops: it writes nothing, and its job
// ends.
func (w *Worker) Work(ctx context.Context, job *river.Job[store.AuditExportArgs]) error {
	id := job.Args.ExportID
	run := max(job.Args.Run, 1)
	key := ObjectKey(id, run, job.Attempt)
	r, err := w.o.DB.BeginAuditExport(ctx, id, run, key)
	if errors.Is(err, store.ErrAuditExportGone) {
		return nil
	}
	if err != nil {
		return err
	}
	began := time.Now()
	events, size, err := w.write(ctx, r, key)
	if err == nil {
		err = w.o.DB.FinishAuditExport(ctx, id, r.Lease, events, size, w.o.TTL)
		if errors.Is(err, store.ErrAuditExportGone) {
			// Expired, deleted or taken over meanwhile: the database knows
			// this run's file no more.
			w.remove(ctx, key)
			return nil
		}
		if err == nil {
			w.m.finished(outcomeSucceeded, time.Since(began), size)
		}
		return err
	}
	if errors.Is(err, store.ErrAuditExportGone) {
		return nil // taken over or ended while it wrote: nothing written
	}
	message, final := failure(err, w.o.MaxBytes)
	if !final && job.Attempt < job.MaxAttempts {
		return err // River runs it again; the next run starts over
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	k, ferr := w.o.DB.FailAuditExport(fctx, id, r.Lease, message, w.o.TTL)
	if errors.Is(ferr, store.ErrAuditExportGone) {
		return nil // another run owns it now
	}
	if ferr != nil {
		return errors.Join(err, ferr)
	}
	w.m.finished(outcomeFailed, time.Since(began), 0)
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

// remove deletes an object the database no longer knows; a failure is
// logged (blobs.FailureLevel) and left to the blob sweeper.
func (w *Worker) remove(ctx context.Context, key string) {
	if err := w.o.Blobs.Delete(context.WithoutCancel(ctx), key); err != nil {
		w.o.Log.Log(ctx, blobs.FailureLevel(err), "audit export: could not delete a file; the blob sweeper will", "key", key, "err", err)
	}
}

// write writes the export's file and returns how many events and bytes it
// holds. On an error the object is not written (the writer is aborted).
func (w *Worker) write(ctx context.Context, run *store.AuditExportRun, key string) (events, size int64, err error) {
	if run.Starter == nil {
		return 0, 0, errNoStarter
	}
	format := string(run.Export.Format)
	beat := &heartbeat{db: w.o.DB, id: run.Export.ID, lease: run.Lease, every: w.o.TakeoverAfter / 8, last: time.Now()}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := w.o.Blobs.NewWriter(wctx, key, contentType(format))
	if err != nil {
		return 0, 0, fmt.Errorf("auditexport: write %s: %w", key, err)
	}
	cw := &countingWriter{w: bw, max: w.o.MaxBytes}
	enc := NewEncoder(cw, format)
	err = w.o.DB.EachAuditEvent(ctx, run.Starter, run.Export.WorkspaceID, run.Filter, nil, nil, func(e *store.AuditEvent) error {
		if err := beat.due(ctx); err != nil {
			return err
		}
		events++
		return enc.Write(e)
	})
	if err == nil {
		err = enc.Flush()
	}
	if err == nil {
		// The last stamp before the file appears: a run taken over while it
		// was blocked past its last event stops here.
		err = beat.stamp(ctx)
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

// heartbeat stamps a run's heartbeat (store.HeartbeatAuditExport) every
// every, as the run goes.
type heartbeat struct {
	db    *store.DB
	id    string
	lease int64
	every time.Duration
	last  time.Time
}

// due stamps the heartbeat when every has passed since the last stamp.
func (h *heartbeat) due(ctx context.Context) error {
	if time.Since(h.last) < h.every {
		return nil
	}
	return h.stamp(ctx)
}

// stamp stamps the heartbeat; store.ErrAuditExportGone means the run lost
// its export.
func (h *heartbeat) stamp(ctx context.Context) error {
	if err := h.db.HeartbeatAuditExport(ctx, h.id, h.lease); err != nil {
		return err
	}
	h.last = time.Now()
	return nil
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
