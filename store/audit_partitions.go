package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditMonthsAhead is how many months after the current one EnsureAuditPartitions
// keeps a partition ready for, so rows never need the DEFAULT partition.
const AuditMonthsAhead = 3

// auditPartitionLockID is the pg_advisory_xact_lock key that serialises partition
// maintenance between instances.
const auditPartitionLockID = 7_261_015_002

// auditPartitionName returns the name of the partition of the month starting at m.
func auditPartitionName(m time.Time) string {
	return fmt.Sprintf("audit_events_p%04d%02d", m.Year(), int(m.Month()))
}

// monthStart returns the first instant (UTC) of t's month.
func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// EnsureAuditPartitions creates the monthly partitions of audit_events for the
// current month and the AuditMonthsAhead months after it, where missing. Each new
// partition gets the append-only TRUNCATE trigger and loses the UPDATE, DELETE and
// TRUNCATE grants, like the table. A month for which the DEFAULT partition already
// holds rows cannot get a partition (Postgres refuses to create it over them): it
// is skipped with a warning, and its rows stay in the DEFAULT partition.
func (db *DB) EnsureAuditPartitions(ctx context.Context) error {
	return ensureAuditPartitions(ctx, db.Pool, time.Now(), db.log)
}

// txBeginner is what both a pool and a connection offer.
type txBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ensureAuditPartitions is EnsureAuditPartitions for the months around now.
func ensureAuditPartitions(ctx context.Context, conn txBeginner, now time.Time, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	first := monthStart(now)
	for i := 0; i <= AuditMonthsAhead; i++ {
		from := first.AddDate(0, i, 0)
		if err := ensureAuditPartition(ctx, conn, from, log); err != nil {
			return err
		}
	}
	return nil
}

// ensureAuditPartition creates the partition of the month starting at from,
// unless it exists or the DEFAULT partition holds rows of that month.
func ensureAuditPartition(ctx context.Context, conn txBeginner, from time.Time, log *slog.Logger) error {
	to := from.AddDate(0, 1, 0)
	name := auditPartitionName(from)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, auditPartitionLockID); err != nil {
			return fmt.Errorf("audit partitions: lock: %w", err)
		}
		var exists, blocked bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
			return fmt.Errorf("audit partitions: %w", err)
		}
		if exists {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_events_default
			WHERE occurred_at >= $1 AND occurred_at < $2)`, from, to).Scan(&blocked); err != nil {
			return fmt.Errorf("audit partitions: %w", err)
		}
		if blocked {
			log.WarnContext(ctx, "audit partition not created: the DEFAULT partition holds rows of that month",
				"partition", name, "from", from, "to", to)
			return nil
		}
		ident := pgx.Identifier{name}.Sanitize()
		stmts := []string{
			fmt.Sprintf(`CREATE TABLE %s PARTITION OF audit_events FOR VALUES FROM ('%s') TO ('%s')`,
				ident, from.Format(time.RFC3339), to.Format(time.RFC3339)),
			fmt.Sprintf(`CREATE TRIGGER %s BEFORE TRUNCATE ON %s
				FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()`,
				pgx.Identifier{name + "_no_truncate"}.Sanitize(), ident),
			fmt.Sprintf(`REVOKE UPDATE, DELETE, TRUNCATE ON %s FROM PUBLIC`, ident),
			fmt.Sprintf(`REVOKE UPDATE, DELETE, TRUNCATE ON %s FROM CURRENT_USER`, ident),
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("audit partition %s: %w", name, err)
			}
		}
		log.InfoContext(ctx, "audit partition created", "partition", name)
		return nil
	})
}

// auditPartitions returns the monthly partitions attached to audit_events with
// the month each starts, oldest first (the DEFAULT partition is not one).
func auditPartitions(ctx context.Context, q Querier) ([]string, []time.Time, error) {
	rows, err := q.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass AND c.relname LIKE 'audit\_events\_p%'
		ORDER BY c.relname`)
	if err != nil {
		return nil, nil, fmt.Errorf("audit partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("audit partitions: %w", err)
	}
	var outNames []string
	var months []time.Time
	for _, n := range names {
		m, err := time.Parse("200601", strings.TrimPrefix(n, "audit_events_p"))
		if err != nil {
			continue
		}
		outNames = append(outNames, n)
		months = append(months, m)
	}
	return outNames, months, nil
}

// DropExpiredAuditPartitions drops the monthly partitions of audit_events whose
// whole month ended before now minus retention, and returns their names;
// retention 0 keeps everything. Before a partition goes, the newest seal of
// each chain among its events (position and hash) becomes the chain's anchor
// in audit_chain_anchors, so that VerifyChain still checks what remains; the
// seals themselves stay (they hold hashes and ids, no content). A partition
// that holds events the sealer has not reached yet is kept until it has.
// DETACH and DROP are DDL (they need the table's owner): the append-only
// triggers do not fire for them. The DEFAULT partition is never dropped.
func (db *DB) DropExpiredAuditPartitions(ctx context.Context, retention time.Duration, now time.Time) ([]string, error) {
	if retention <= 0 {
		return nil, nil
	}
	names, months, err := auditPartitions(ctx, db.Pool)
	if err != nil {
		return nil, err
	}
	cutoff := now.Add(-retention)
	var dropped []string
	for i, name := range names {
		end := months[i].AddDate(0, 1, 0)
		if end.After(cutoff) {
			break
		}
		unsealed := false
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, auditPartitionLockID); err != nil {
				return err
			}
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil || !exists {
				return err
			}
			ident := pgx.Identifier{name}.Sanitize()
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_seal_cursor c CROSS JOIN LATERAL
				(SELECT 1 FROM `+ident+` e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq) LIMIT 1) x WHERE c.id = 1)`).
				Scan(&unsealed); err != nil || unsealed {
				return err
			}
			// Detach first: it takes the parent's lock, so no chain walk or
			// append sees the partition half-gone.
			if _, err := tx.Exec(ctx, `ALTER TABLE audit_events DETACH PARTITION `+ident); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO audit_chain_anchors (chain_key, hash, event_id, event_at, events)
				SELECT DISTINCT ON (s.chain_key) s.chain_key, s.hash, s.event_id, s.occurred_at, s.position
				FROM audit_seals s JOIN `+ident+` e ON e.id = s.event_id AND e.occurred_at = s.occurred_at
				ORDER BY s.chain_key, s.position DESC
				ON CONFLICT (chain_key) DO UPDATE SET hash = excluded.hash, event_id = excluded.event_id,
					event_at = excluded.event_at, events = excluded.events
				WHERE excluded.events > audit_chain_anchors.events`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DROP TABLE `+ident)
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("audit retention: drop %s: %w", name, err)
		}
		if unsealed {
			db.log.WarnContext(ctx, "audit partition kept past retention: it holds events not sealed yet", "partition", name)
			break
		}
		db.log.InfoContext(ctx, "audit partition dropped by retention", "partition", name, "retention", retention.String())
		dropped = append(dropped, name)
	}
	return dropped, nil
}

// RunAuditMaintenance keeps audit partitions ready and applies retention (0:
// keep everything) now and then every interval, until ctx ends. Errors are
// logged; the next round tries again.
func (db *DB) RunAuditMaintenance(ctx context.Context, retention, every time.Duration) {
	if every <= 0 {
		every = 6 * time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := db.EnsureAuditPartitions(ctx); err != nil && ctx.Err() == nil {
			db.log.ErrorContext(ctx, "audit partitions", "err", err)
		}
		if _, err := db.DropExpiredAuditPartitions(ctx, retention, time.Now()); err != nil && ctx.Err() == nil {
			db.log.ErrorContext(ctx, "audit retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
