package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"taskflow/audit"
)

// appendAudit appends ev to its hash chain inside tx: it locks the chain's head
// row (serialising appends per workspace for this transaction), hashes the event
// over the previous head and inserts it. The request context (IP, user agent,
// request id) comes from ctx. It must run in the transaction of the change it
// records, so that both commit or neither does.
func (db *DB) appendAudit(ctx context.Context, tx pgx.Tx, ev audit.Event) error {
	info := audit.InfoFrom(ctx)
	meta, err := audit.NormalizeMetadata(ev.Metadata)
	if err != nil {
		return err
	}
	rec := audit.Record{
		ID:          uuid.Must(uuid.NewV7()).String(),
		ChainKey:    ev.ChainKey(),
		WorkspaceID: ev.WorkspaceID,
		ActorID:     ev.ActorID,
		Action:      ev.Action,
		EntityType:  ev.EntityType(),
		EntityID:    ev.EntityID,
		OccurredAt:  time.Now().UTC().Truncate(time.Microsecond),
		IP:          nonEmpty(info.IP),
		UserAgent:   nonEmpty(info.UserAgent),
		RequestID:   nonEmpty(info.RequestID),
		Metadata:    meta,
	}
	// Serialise appends to this chain until the transaction ends.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('audit:' || $1, 0))`, rec.ChainKey); err != nil {
		return fmt.Errorf("audit lock: %w", err)
	}
	var prev []byte
	var lastAt time.Time
	err = tx.QueryRow(ctx, `SELECT head_hash, event_at FROM audit_chain_heads WHERE chain_key = $1`, rec.ChainKey).Scan(&prev, &lastAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("audit head: %w", err)
	}
	// Keep the chain's order and time order the same even if clocks of two
	// instances disagree by a little.
	if !lastAt.IsZero() && !rec.OccurredAt.After(lastAt) {
		rec.OccurredAt = lastAt.Add(time.Microsecond)
	}
	hash, err := audit.Hash(prev, rec)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action,
		entity_type, entity_id, occurred_at, ip, user_agent, request_id, metadata, prev_hash, hash)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		rec.ID, rec.ChainKey, rec.WorkspaceID, rec.ActorID, rec.Action, rec.EntityType, rec.EntityID,
		rec.OccurredAt, rec.IP, rec.UserAgent, rec.RequestID, rec.Metadata, prev, hash)
	if err != nil {
		return fmt.Errorf("audit insert: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO audit_chain_heads (chain_key, head_hash, event_id, event_at, events)
		VALUES ($1, $2, $3, $4, 1)
		ON CONFLICT (chain_key) DO UPDATE SET head_hash = excluded.head_hash,
			event_id = excluded.event_id, event_at = excluded.event_at,
			events = audit_chain_heads.events + 1`,
		rec.ChainKey, hash, rec.ID, rec.OccurredAt)
	if err != nil {
		return fmt.Errorf("audit head: %w", err)
	}
	return nil
}

// nonEmpty returns nil for "" and &s otherwise.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
