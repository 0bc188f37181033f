// Package webhook delivers a workspace's events to its webhook endpoints: a
// River client (github.com/riverqueue/river) works the delivery jobs that
// the store's dispatcher inserts, on every instance, and each attempt is a
// signed POST (Standard Webhooks) through an egress-guarded HTTP client.
// Start runs it all from server.go, on the server's own Postgres.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"

	"taskflow/egress"
	"taskflow/store"
	"taskflow/tracing"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds one attempt, from connecting to the end of the
	// answer.
	DefaultTimeout = 15 * time.Second
	// DefaultRetryBase is the wait before the first retry; each later wait
	// is three times the one before, up to MaxRetryWait.
	DefaultRetryBase = 15 * time.Second
	// DefaultWorkers is how many attempts one instance makes at once.
	DefaultWorkers = 16
	// DefaultDisableAfter disables an endpoint whose attempts all failed for
	// this long.
	DefaultDisableAfter = 5 * 24 * time.Hour
	// PollInterval is how often each instance looks for due jobs: River runs
	// without LISTEN (poll-only), so that PgBouncer in transaction mode works.
	PollInterval = 250 * time.Millisecond
)

// MaxRetryWait caps the wait between two attempts.
const MaxRetryWait = 6 * time.Hour

// SweepInterval is how often the leader's River client marks FAILED the
// PENDING deliveries that nothing will attempt again
// (store.FailStrandedWebhookDeliveries), and once at its start.
const SweepInterval = 5 * time.Minute

// leaseMargin is how much longer than its timeout an attempt holds its
// delivery (store.ClaimWebhookAttempt): room for the database work around
// the request and for clock skew between the instance and Postgres.
const leaseMargin = 10 * time.Second

// Options configure Start.
type Options struct {
	DB  *store.DB
	Log *slog.Logger
	// Registerer takes the metrics (nil: none are registered).
	Registerer prometheus.Registerer
	// Tracing wraps outgoing requests in client spans that carry the trace
	// (nil: tracing off).
	Tracing trace.TracerProvider
	// Timeout bounds one attempt (WEBHOOK_TIMEOUT; zero: DefaultTimeout).
	Timeout time.Duration
	// RetryBase is the wait before the first retry (WEBHOOK_RETRY_BASE;
	// zero: DefaultRetryBase).
	RetryBase time.Duration
	// Workers is how many attempts this instance makes at once
	// (WEBHOOK_WORKERS; zero: DefaultWorkers).
	Workers int
	// DisableAfter disables an endpoint failing for this long (zero:
	// DefaultDisableAfter).
	DisableAfter time.Duration
	// More are River jobs of other packages (audit exports) that this
	// instance's River client works too: one client per instance, whose
	// leader's maintenance (rescue of stuck jobs) must know every kind.
	More []Jobs
}

// Jobs are River jobs of another package for the instance's River client.
type Jobs struct {
	// Register adds their workers.
	Register func(*river.Workers)
	// Queues are their queues, which must not be the webhooks' or River's
	// default.
	Queues map[string]river.QueueConfig
	// Periodic are their periodic jobs, inserted into their own queues.
	// (River's rescuer leaves a running job alone within its worker's
	// Timeout, however long: RescueStuckJobsAfter below is the webhooks'.)
	Periodic []*river.PeriodicJob
}

func (o *Options) defaults() {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.DisableAfter <= 0 {
		o.DisableAfter = DefaultDisableAfter
	}
}

// Service is the webhook engine of one instance: the dispatcher and the
// River client that works deliveries.
type Service struct {
	river      *river.Client[pgx.Tx]
	stopRounds context.CancelFunc
	dispatched chan struct{}
}

// Start starts the dispatcher and the River client of this instance. Stop
// ends both.
func Start(ctx context.Context, o Options) (*Service, error) {
	o.defaults()
	m := newMetrics(o.Registerer, o.DB)
	w := &worker{db: o.DB, log: o.Log, timeout: o.Timeout, retryBase: o.RetryBase, disableAfter: o.DisableAfter,
		metrics: m,
		client: o.DB.Egress.Client(egress.ClientOptions{Timeout: o.Timeout, Wrap: func(rt http.RoundTripper) http.RoundTripper {
			return tracing.Transport(o.Tracing, rt)
		}})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, _ *river.Job[cleanupArgs]) error {
		_, err := o.DB.PurgeWebhookDeliveries(ctx, store.WebhookDeliveryRetention)
		return err
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, _ *river.Job[sweepArgs]) error {
		n, err := o.DB.FailStrandedWebhookDeliveries(ctx)
		if n > 0 {
			m.finishes.WithLabelValues(string(store.WebhookFailed)).Add(float64(n))
			o.Log.WarnContext(ctx, "webhook deliveries left PENDING with no attempt to come marked FAILED", "deliveries", n)
		}
		if err != nil && ctx.Err() == nil {
			// River logs a job's error below the level it logs at.
			o.Log.ErrorContext(ctx, "webhook sweep", "err", err)
		}
		return err
	}))
	jobTimeout := o.Timeout + leaseMargin
	queues := map[string]river.QueueConfig{store.WebhookQueue: {MaxWorkers: o.Workers}, river.QueueDefault: {MaxWorkers: 1}}
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
			func() (river.JobArgs, *river.InsertOpts) { return cleanupArgs{}, nil }, nil),
		river.NewPeriodicJob(river.PeriodicInterval(SweepInterval),
			func() (river.JobArgs, *river.InsertOpts) { return sweepArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
	}
	for _, m := range o.More {
		m.Register(workers)
		for q, c := range m.Queues {
			if _, ok := queues[q]; ok {
				return nil, fmt.Errorf("webhooks: queue %s is taken", q)
			}
			queues[q] = c
		}
		periodic = append(periodic, m.Periodic...)
	}
	client, err := river.NewClient(riverpgxv5.New(o.DB.Pool), &river.Config{
		Queues:            queues,
		Workers:           workers,
		PollOnly:          true,
		FetchPollInterval: PollInterval,
		// A fetch at most every 20 ms: a fetch takes up to Workers jobs, so
		// River's default 100 ms capped one instance at 160 deliveries/s.
		FetchCooldown: 20 * time.Millisecond,
		JobTimeout:    jobTimeout,
		// A job still running after this is taken for one whose instance
		// died, and is retried; its attempt ended long before (jobTimeout).
		RescueStuckJobsAfter: jobTimeout + river.JobStuckThresholdDefault + leaseMargin,
		Logger:               slog.New(minLevel{o.Log.Handler(), slog.LevelWarn}),
		PeriodicJobs:         periodic,
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	roundsCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Service{river: client, stopRounds: stop, dispatched: make(chan struct{})}
	go func() {
		defer close(s.dispatched)
		(&store.WebhookDispatcher{DB: o.DB}).Run(roundsCtx)
	}()
	return s, nil
}

// Stop stops dispatching, lets the attempts in flight finish until ctx ends
// (then cancels them: their deliveries are retried later) and returns when
// every goroutine of the service has ended.
func (s *Service) Stop(ctx context.Context) error {
	s.stopRounds()
	<-s.dispatched
	err := s.river.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = s.river.StopAndCancel(context.WithoutCancel(ctx))
	}
	return err
}

// cleanupArgs is the hourly job that deletes old finished deliveries.
type cleanupArgs struct{}

// Kind is the job's kind.
func (cleanupArgs) Kind() string { return "webhook_cleanup" }

// InsertOpts keep one cleanup at a time.
func (cleanupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: time.Hour}}
}

// sweepArgs is the periodic job that ends the deliveries nothing will attempt
// again (SweepInterval).
type sweepArgs struct{}

// Kind is the job's kind.
func (sweepArgs) Kind() string { return "webhook_sweep" }

// InsertOpts keep one sweep at a time.
func (sweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: SweepInterval}}
}

// RetryWait is the wait after failed attempt n (1 for the first) of a
// delivery: base·3^(n−1), at most MaxRetryWait, times a jitter from 0.8 to
// 1.2 that seed (the job) and n fix, so that a schedule computed twice is the
// same and deliveries that failed together do not retry together.
func RetryWait(base time.Duration, n int, seed int64) time.Duration {
	d := float64(base) * math.Pow(3, float64(max(n, 1)-1))
	d = min(d, float64(MaxRetryWait))
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", seed, n)
	jitter := 0.8 + 0.4*float64(h.Sum64()%10000)/10000
	return time.Duration(d * jitter)
}

// Schedule returns the waits between the attempts of a delivery with
// WebhookMaxAttempts attempts and base (jitter left out): the documented
// retry schedule.
func Schedule(base time.Duration) []time.Duration {
	out := make([]time.Duration, store.WebhookMaxAttempts-1)
	for i := range out {
		out[i] = min(time.Duration(float64(base)*math.Pow(3, float64(i))), MaxRetryWait)
	}
	return out
}

// minLevel drops records below min (River logs every failed attempt at
// info; the delivery records it).
type minLevel struct {
	slog.Handler
	min slog.Level
}

// Enabled reports whether l is at least min and the handler takes it.
func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

// WithAttrs keeps the filter.
func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(a), h.min}
}

// WithGroup keeps the filter.
func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
