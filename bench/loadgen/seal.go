package loadgen

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
)

// SealStats are what the audit sealer did while a write scenario ran.
type SealStats struct {
	Scenario string
	// Events is the number of audit events that occurred during the run.
	Events int
	// WriteRate is Events per second of the run; SealRate is the events
	// sealed during the run per second (of any time).
	WriteRate, SealRate float64
	// LagP50, LagP99 and LagMax are of the time from an event's occurrence
	// (the unit of work's last batch, right before COMMIT) to its seal's
	// commit-side clock (sealed_at, taken right before the sealing COMMIT).
	LagP50, LagP99, LagMax time.Duration
	// Backlog is the number of events not sealed when the run ended, and
	// Drain the time until the sealer had caught up with them.
	Backlog int
	Drain   time.Duration
	// OldestP50 and OldestMax are of the age of the oldest transaction with
	// an id anywhere in the cluster, sampled every 50 ms during the run: it
	// holds the spine's horizon back, and the lag with it.
	OldestP50, OldestMax time.Duration
}

// oldestSample is the age of the cluster's oldest transaction with an id at
// a time.
type oldestSample struct {
	at  time.Time
	age time.Duration
}

// oldestSampler samples the age of the cluster's oldest transaction that
// has an id until stop is called, which returns the samples.
func oldestSampler(ctx context.Context, pool *pgxpool.Pool) (stop func() []oldestSample) {
	done := make(chan struct{})
	out := make(chan []oldestSample, 1)
	go func() {
		var ages []oldestSample
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				out <- ages
				return
			case <-t.C:
			}
			var secs float64
			if err := pool.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0)
				FROM pg_stat_activity WHERE backend_xid IS NOT NULL`).Scan(&secs); err == nil {
				ages = append(ages, oldestSample{time.Now(), time.Duration(secs * float64(time.Second))})
			}
		}
	}()
	return func() []oldestSample { close(done); return <-out }
}

// sealStats waits for the sealer to catch up with the events of a run from
// start to end (at most a minute) and measures it, with the samples of the
// oldest transaction taken during the run.
func sealStats(ctx context.Context, pool *pgxpool.Pool, scenario string, start, end time.Time, samples []oldestSample) (SealStats, error) {
	db := store.New(pool, nil)
	s := SealStats{Scenario: scenario}
	var oldest []time.Duration
	for _, o := range samples {
		if !o.at.Before(start) && o.at.Before(end) {
			oldest = append(oldest, o.age)
		}
	}
	if len(oldest) > 0 {
		slices.Sort(oldest)
		s.OldestP50, s.OldestMax = oldest[len(oldest)/2], oldest[len(oldest)-1]
	}
	unsealed := func() (int, error) {
		b, err := db.AuditSealBacklog(ctx)
		return b.Events, err
	}
	var err error
	if s.Backlog, err = unsealed(); err != nil {
		return s, err
	}
	for n := s.Backlog; n > 0; {
		if time.Since(end) > time.Minute {
			return s, fmt.Errorf("seal: %d events still unsealed a minute after the run", n)
		}
		time.Sleep(5 * time.Millisecond)
		if n, err = unsealed(); err != nil {
			return s, err
		}
	}
	s.Drain = time.Since(end)
	if s.Backlog == 0 {
		s.Drain = 0
	}
	var p50, p99, pmax float64
	var sealedDuring int
	err = pool.QueryRow(ctx, `SELECT count(*),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.sealed_at - e.occurred_at)), 0),
			coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM s.sealed_at - e.occurred_at)), 0),
			coalesce(max(extract(epoch FROM s.sealed_at - e.occurred_at)), 0),
			count(*) FILTER (WHERE s.sealed_at < $2)
		FROM audit_events e JOIN audit_seals s ON s.event_id = e.id AND s.occurred_at = e.occurred_at
		WHERE e.occurred_at >= $1 AND e.occurred_at < $2`, start, end).Scan(&s.Events, &p50, &p99, &pmax, &sealedDuring)
	if err != nil {
		return s, err
	}
	secs := end.Sub(start).Seconds()
	s.WriteRate, s.SealRate = float64(s.Events)/secs, float64(sealedDuring)/secs
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	s.LagP50, s.LagP99, s.LagMax = sec(p50), sec(p99), sec(pmax)
	return s, nil
}

// markdown writes the sealing table.
func (r *Report) sealMarkdown(w io.Writer) {
	if len(r.Seal) == 0 {
		return
	}
	fmt.Fprintf(w, "\nAudit sealer during the write scenarios (one sealer, rounds of up to 1000 events; lag from the event's time, taken right before its COMMIT, to its seal's, taken right before the sealing COMMIT):\n\n")
	fmt.Fprintf(w, "| scenario | events | written/s | sealed/s | lag p50 | lag p99 | lag max | unsealed at the end | caught up after | oldest transaction in the cluster, p50 / max |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.Seal {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %s | %s | %s | %d | %s | %s / %s |\n", s.Scenario, s.Events, s.WriteRate, s.SealRate,
			ms(s.LagP50), ms(s.LagP99), ms(s.LagMax), s.Backlog, ms(s.Drain), ms(s.OldestP50), ms(s.OldestMax))
	}
}

// sealed waits, at most two minutes, until the audit sealer has sealed every
// committed event on the spine.
func sealed(ctx context.Context, pool *pgxpool.Pool) error {
	db := store.New(pool, nil)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := db.AuditSealBacklog(ctx)
		if err != nil {
			return err
		}
		if b.Events == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the audit sealer did not catch up in 2 minutes: %d events wait", b.Events)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
