package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"taskflow/audit"
	"taskflow/reqinfo"
)

// appendAudit records ev in tx: a plain insert of the event, unchained. It
// takes no lock and reads or writes no chain head: the sealer chains
// committed events shortly after (AuditSealer), so a workspace's writes do not
// wait on each other for the log. The request context (IP, user agent,
// request id) comes from ctx. It must run in the transaction of the change it
// records, so that both commit or neither does. In a unit of work the event
// is queued and inserted in the batch that ends it, with the deferred writes
// (see UnitOfWork).
func (db *DB) appendAudit(ctx context.Context, tx Querier, ev audit.Event) error {
	rec, err := newAuditRecord(ctx, ev)
	if err != nil {
		return err
	}
	if u, _ := ctx.Value(txKey{}).(*unitOfWork); u != nil && u.tx == tx && !u.ended.Load() {
		// Inside a unit of work: inserted when it ends (see UnitOfWork).
		u.audits = append(u.audits, rec)
		return nil
	}
	return insertAudit(ctx, tx, rec, time.Now())
}

// appendAuditAt is appendAudit outside a unit of work with the clock now
// (tests append in the past).
func appendAuditAt(ctx context.Context, tx Querier, ev audit.Event, now func() time.Time) error {
	rec, err := newAuditRecord(ctx, ev)
	if err != nil {
		return err
	}
	return insertAudit(ctx, tx, rec, now())
}

// insertAudit inserts rec as it occurred at at.
func insertAudit(ctx context.Context, tx Querier, rec audit.Record, at time.Time) error {
	rec.OccurredAt = at.UTC().Truncate(time.Microsecond)
	if _, err := tx.Exec(ctx, insertAuditSQL, auditRecordArgs(&rec)...); err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	return nil
}

// newAuditRecord returns the record of ev with a new id and the request
// context of ctx, all but its time.
func newAuditRecord(ctx context.Context, ev audit.Event) (audit.Record, error) {
	if ev.Action == "" || ev.EntityType() == ev.Action {
		return audit.Record{}, fmt.Errorf("audit: action %q is not of the form entity.verb", ev.Action)
	}
	wsID, err := canonicalUUID(ev.WorkspaceID)
	if err != nil {
		return audit.Record{}, fmt.Errorf("audit: workspace id: %w", err)
	}
	actorID, err := canonicalUUID(ev.ActorID)
	if err != nil {
		return audit.Record{}, fmt.Errorf("audit: actor id: %w", err)
	}
	ev.WorkspaceID, ev.ActorID = wsID, actorID
	info := reqinfo.From(ctx)
	meta, err := audit.NormalizeMetadata(ev.Metadata)
	if err != nil {
		return audit.Record{}, err
	}
	return audit.Record{
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
	}, nil
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
