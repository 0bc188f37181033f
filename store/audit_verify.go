package store

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
)

// VerifyAuditLog walks the workspace's hash chain in order and recomputes every
// event's hash over the previous one; see VerifyChain. It returns
// UNAUTHENTICATED for no user, NOT_FOUND if the workspace does not exist or user
// is not a member, and FORBIDDEN for a MEMBER or VIEWER.
func (db *DB) VerifyAuditLog(ctx context.Context, user *User, workspaceID string) (*AuditVerification, error) {
	if err := db.requireAuditReader(ctx, workspaceID, user); err != nil {
		return nil, err
	}
	return db.VerifyChain(ctx, workspaceID)
}

// VerifyChain walks the hash chain named chainKey (a workspace id, or
// "user:<id>") oldest first, streaming the rows in one snapshot, and checks that
// each event's prev_hash is the hash of the event before it (or of the last
// event retention dropped), that its hash is the hash of its canonical encoding
// over prev_hash, and that the last event and the number of events are those the
// chain's head recorded. The first event that fails is reported: an edited event
// itself, the event after a deleted one, or the head's event when the newest
// events were deleted.
func (db *DB) VerifyChain(ctx context.Context, chainKey string) (*AuditVerification, error) {
	out := &AuditVerification{Valid: true}
	err := pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var head struct {
			hash   []byte
			id     string
			events int64
		}
		err := tx.QueryRow(ctx, `SELECT head_hash, event_id, events FROM audit_chain_heads WHERE chain_key = $1`, chainKey).
			Scan(&head.hash, &head.id, &head.events)
		hasHead := err == nil
		if err != nil && !auditNoRows(err) {
			return err
		}
		var expected []byte
		var dropped int64
		err = tx.QueryRow(ctx, `SELECT hash, events FROM audit_chain_anchors WHERE chain_key = $1`, chainKey).Scan(&expected, &dropped)
		if err != nil && !auditNoRows(err) {
			return err
		}
		invalid := func(id string) {
			if out.Valid {
				out.Valid = false
				out.FirstInvalidEventID = &id
			}
		}
		rows, err := tx.Query(ctx, `SELECT id, chain_key, workspace_id, actor_id, action, entity_type, entity_id,
			occurred_at, ip, user_agent, request_id, metadata, prev_hash, hash, trace_id
			FROM audit_events WHERE chain_key = $1 ORDER BY occurred_at, id`, chainKey)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			r          audit.Record
			at         time.Time
			meta       []byte
			prev, hash []byte
			lastID     string
		)
		for rows.Next() {
			if err := rows.Scan(&r.ID, &r.ChainKey, &r.WorkspaceID, &r.ActorID, &r.Action, &r.EntityType, &r.EntityID,
				&at, &r.IP, &r.UserAgent, &r.RequestID, &meta, &prev, &hash, &r.TraceID); err != nil {
				return err
			}
			out.CheckedEvents++
			lastID = r.ID
			r.OccurredAt = at
			if !out.Valid {
				continue
			}
			if !bytes.Equal(prev, expected) {
				invalid(r.ID)
				continue
			}
			r.Metadata, err = audit.DecodeMetadata(meta)
			if err != nil {
				invalid(r.ID)
				continue
			}
			sum, err := audit.Hash(prev, r)
			if err != nil || !bytes.Equal(sum, hash) {
				invalid(r.ID)
				continue
			}
			expected = hash
		}
		if err := rows.Err(); err != nil {
			return err
		}
		switch {
		case !out.Valid:
		case !hasHead && out.CheckedEvents > 0:
			// Events with no head: the chain's end is not vouched for.
			invalid(lastID)
		case hasHead && (!bytes.Equal(expected, head.hash) || int64(out.CheckedEvents)+dropped != head.events):
			// The newest events are missing (or the head was changed).
			invalid(head.id)
		}
		if hasHead {
			h := hex.EncodeToString(head.hash)
			out.HeadHash = &h
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify audit log: %w", err)
	}
	return out, nil
}
