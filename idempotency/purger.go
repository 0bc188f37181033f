package idempotency

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/store"
)

// Purger deletes expired idempotency keys in small batches. Batches skip rows
// that another purger has locked, so every instance can run one.
type Purger struct {
	db       *store.DB
	interval time.Duration
	batch    int
	log      *slog.Logger
	metrics  *metrics
}

// PurgerOptions configure a Purger.
type PurgerOptions struct {
	DB *store.DB
	// Interval between purges; 0 means one minute.
	Interval time.Duration
	// Batch is the most rows one DELETE removes; 0 means 500.
	Batch int
	// Registerer receives the purged-rows counter; nil leaves it unregistered.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// NewPurger returns a Purger.
func NewPurger(o PurgerOptions) *Purger {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Purger{db: o.DB, interval: o.Interval, batch: o.Batch, log: o.Log, metrics: newMetrics(o.Registerer)}
}

// Start purges now and then every interval, in a goroutine, until ctx is done.
func (p *Purger) Start(ctx context.Context) {
	go func() {
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			if _, err := p.PurgeOnce(ctx); err != nil && ctx.Err() == nil {
				p.log.WarnContext(ctx, "purge idempotency keys", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// PurgeOnce deletes expired keys batch by batch until a batch comes back short,
// and returns how many it deleted.
func (p *Purger) PurgeOnce(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := p.db.PurgeExpiredIdempotencyKeys(ctx, p.batch)
		total += n
		p.metrics.purged.Add(float64(n))
		if err != nil || n < int64(p.batch) {
			return total, err
		}
	}
}
