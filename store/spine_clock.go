package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrSpineAhead is returned (wrapped) by CheckSpineClock when an audit event
// or a spine cursor carries a transaction id this Postgres cluster has not
// assigned yet: the database was restored from a logical dump (pg_dump) of
// another cluster, whose transaction ids ran higher. Every event written from
// then on would sort below the cursors, so it would never be sealed, delivered
// to webhooks or sent to subscribers, and verifyAuditLog would report it as
// slipped in (docs/operations.md, "Backups and restores").
var ErrSpineAhead = errors.New("the audit log holds transaction ids this Postgres cluster has not reached: restored from a logical dump of another cluster")

// CheckSpineClock returns ErrSpineAhead (wrapped, naming the highest id found
// and the cluster's next one) when the newest audit event, the sealer's
// cursor or the webhook dispatcher's cursor carries a transaction id at or
// past the next one the cluster will assign, and nil otherwise, or the
// database's error. It reads three index probes and assigns no transaction
// id: the server calls it at start, before it writes.
func (db *DB) CheckSpineClock(ctx context.Context) error {
	var ahead bool
	var next, highest string
	err := db.Pool.QueryRow(ctx, `SELECT coalesce(h.id >= n.id, false), n.id::text, coalesce(h.id::text, '')
		FROM (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS id) n,
			(SELECT greatest((SELECT max(tx_id) FROM audit_events), (SELECT tx_id FROM audit_seal_cursor WHERE id = 1),
				(SELECT tx_id FROM webhook_dispatch_cursor WHERE id = 1)) AS id) h`).Scan(&ahead, &next, &highest)
	if err != nil {
		return fmt.Errorf("check the spine's transaction ids: %w", err)
	}
	if ahead {
		return fmt.Errorf("%w (highest id %s, the cluster's next %s)", ErrSpineAhead, highest, next)
	}
	return nil
}
