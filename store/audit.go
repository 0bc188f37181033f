package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/reqinfo"
)

// appendAudit appends ev to its hash chain inside tx: it takes the chain's
// transaction-scoped advisory lock (serialising appends per workspace until tx
// ends), reads the chain's head, hashes the event over the previous head hash and
// inserts it, then moves the head. The request context (IP, user agent, request
// id, trace id) comes from ctx. It must run in the transaction of the change it records,
// so that both commit or neither does. In a unit of work the event is queued
// and appended right before the commit, which keeps the chain's lock short.
//
// Within a chain the order of the hash chain, the order of commits and the order
// of (occurred_at, id) are the same: the time is taken under the lock and is made
// later than the head's even if the clocks of two instances disagree, so a page
// cursor never sees an event of its workspace appear behind it.
func (db *DB) appendAudit(ctx context.Context, tx Querier, ev audit.Event) error {
	if u, _ := ctx.Value(txKey{}).(*unitOfWork); u != nil && u.tx == tx && !u.ended.Load() {
		// Inside a unit of work: appended when it commits (see UnitOfWork).
		u.audits = append(u.audits, ev)
		return nil
	}
	return appendAuditAt(ctx, tx, ev, time.Now)
}

// appendAuditAt is appendAudit with the clock now (tests append in the past).
func appendAuditAt(ctx context.Context, tx Querier, ev audit.Event, now func() time.Time) error {
	return appendAuditWith(ctx, tx, ev, now, nil)
}

// appendAuditWith is appendAuditAt that first sends the writes pre in the same
// round trip as the chain's lock and the read of its head.
func appendAuditWith(ctx context.Context, tx Querier, ev audit.Event, now func() time.Time, pre []deferredExec) error {
	if ev.Action == "" || ev.EntityType() == ev.Action {
		return fmt.Errorf("audit: action %q is not of the form entity.verb", ev.Action)
	}
	wsID, err := canonicalUUID(ev.WorkspaceID)
	if err != nil {
		return fmt.Errorf("audit: workspace id: %w", err)
	}
	actorID, err := canonicalUUID(ev.ActorID)
	if err != nil {
		return fmt.Errorf("audit: actor id: %w", err)
	}
	ev.WorkspaceID, ev.ActorID = wsID, actorID
	info := reqinfo.From(ctx)
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
		EntityID:    audit.CleanText(ev.EntityID),
		IP:          nonEmpty(audit.CleanText(info.IP)),
		UserAgent:   nonEmpty(audit.CleanText(info.UserAgent)),
		RequestID:   nonEmpty(audit.CleanText(info.RequestID)),
		TraceID:     nonEmpty(audit.CleanText(info.TraceID)),
		Metadata:    meta,
	}
	// Serialise appends to this chain until the transaction ends, then read its
	// head: one round trip. The read is a statement of its own, so under READ
	// COMMITTED its snapshot is taken once the lock is held and sees the head
	// the previous holder committed.
	var prev []byte
	var lastAt time.Time
	b := &pgx.Batch{}
	queue(b, pre)
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('audit:' || $1, 0))`, rec.ChainKey)
	b.Queue(`SELECT head_hash, event_at FROM audit_chain_heads WHERE chain_key = $1`, rec.ChainKey).
		QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&prev, &lastAt); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return nil
		})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("audit lock and head: %w", err)
	}
	// The time is taken under the lock, and kept after the head's even if the
	// clocks of two instances disagree by a little.
	rec.OccurredAt = now().UTC().Truncate(time.Microsecond)
	if !lastAt.IsZero() && !rec.OccurredAt.After(lastAt) {
		rec.OccurredAt = lastAt.UTC().Add(time.Microsecond)
	}
	hash, err := audit.Hash(prev, rec)
	if err != nil {
		return err
	}
	// The event and the chain's new head in one statement: one round trip less
	// while the chain's lock is held, which is what bounds a workspace's write
	// throughput (bench/README.md).
	_, err = tx.Exec(ctx, `WITH ev AS (
			INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action,
				entity_type, entity_id, occurred_at, ip, user_agent, request_id, metadata, prev_hash, hash, trace_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
			RETURNING id, chain_key, hash, occurred_at)
		INSERT INTO audit_chain_heads (chain_key, head_hash, event_id, event_at, events)
		SELECT chain_key, hash, id, occurred_at, 1 FROM ev
		ON CONFLICT (chain_key) DO UPDATE SET head_hash = excluded.head_hash,
			event_id = excluded.event_id, event_at = excluded.event_at,
			events = audit_chain_heads.events + 1`,
		rec.ID, rec.ChainKey, rec.WorkspaceID, rec.ActorID, rec.Action, rec.EntityType, rec.EntityID,
		rec.OccurredAt, rec.IP, rec.UserAgent, rec.RequestID, rec.Metadata, prev, hash, rec.TraceID)
	if err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	return nil
}

// canonicalUUID returns the canonical (lower-case, hyphenated) form of an id, so
// that the hash covers the same text Postgres gives back; nil stays nil.
func canonicalUUID(id *string) (*string, error) {
	if id == nil {
		return nil, nil
	}
	u, err := uuid.Parse(*id)
	if err != nil {
		return nil, err
	}
	s := u.String()
	return &s, nil
}

// nonEmpty returns nil for "" and &s otherwise.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
