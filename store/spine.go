package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"taskflow/audit"
	"taskflow/errs"
)

// SpineCursor is a position in the event spine: the audit log in the order
// (tx_id, seq), the id of the transaction that inserted an event and the
// order of inserts. A reader that keeps the cursor of the last event it read
// reads every committed event after it exactly once (ReadSpine; why:
// docs/decisions/2026-12-01-event-spine.md). The zero cursor is the start.
type SpineCursor struct {
	TxID uint64
	Seq  int64
}

// spineCursorVersion is the first byte of an encoded cursor.
const spineCursorVersion = 1

// String returns the cursor as clients hold it: opaque, the base64url (no
// padding) of a version byte and both numbers, big-endian.
func (c SpineCursor) String() string {
	var b [17]byte
	b[0] = spineCursorVersion
	binary.BigEndian.PutUint64(b[1:9], c.TxID)
	binary.BigEndian.PutUint64(b[9:], uint64(c.Seq))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// less reports whether c comes before d in spine order.
func (c SpineCursor) less(d SpineCursor) bool {
	return c.TxID < d.TxID || c.TxID == d.TxID && c.Seq < d.Seq
}

// ParseSpineCursor reads a cursor made by SpineCursor.String; anything else is
// BAD_USER_INPUT.
func ParseSpineCursor(s string) (SpineCursor, error) {
	bad := errs.Errorf(errs.CodeBadUserInput, "not an event cursor: use one this API returned")
	if len(s) != 23 {
		return SpineCursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 17 || b[0] != spineCursorVersion {
		return SpineCursor{}, bad
	}
	seq := binary.BigEndian.Uint64(b[9:])
	if seq > math.MaxInt64 {
		return SpineCursor{}, bad
	}
	return SpineCursor{TxID: binary.BigEndian.Uint64(b[1:9]), Seq: int64(seq)}, nil
}

// SpineFilter narrows a read of the spine; every set field must match.
type SpineFilter struct {
	// ChainKeys keeps the events of these chains (workspace ids,
	// "user:<id>", "anonymous"); nil: every chain, an empty list: none.
	ChainKeys []string
	// Actions keeps events of these actions, exact or prefixes ending in "*"
	// as in AuditFilter; empty: every action. With Audit set, an event of
	// these actions is kept whether or not it matches Audit.
	Actions []string
	// Audit, when set, keeps the events that match it as auditEvents'
	// filter does (every set field), besides those of Actions.
	Audit *AuditFilter
	// MaxScan, when more than 0, is the most events past the cursor the
	// read looks at, matching or not: a read whose filter keeps few events
	// stops there (SpineRead.Cut) instead of scanning the whole spine in one
	// statement.
	MaxScan int
}

// where returns the SQL conditions of the filter on audit_events and their
// arguments, numbering placeholders after the args already given.
func (filter SpineFilter) where(args []any) (string, []any, error) {
	var where string
	if filter.ChainKeys != nil {
		args = append(args, filter.ChainKeys)
		where += " AND chain_key = ANY($" + strconv.Itoa(len(args)) + "::text[])"
	}
	var actions string
	if len(filter.Actions) > 0 {
		f, err := AuditFilter{Actions: filter.Actions}.normalized()
		if err != nil {
			return "", nil, err
		}
		actions, args, _ = f.auditWhere(args)
	}
	if filter.Audit == nil {
		return where + actions, args, nil
	}
	f, err := filter.Audit.normalized()
	if err != nil {
		return "", nil, err
	}
	cond, a, ok := f.auditWhere(args)
	match := "false"
	if ok {
		match, args = "true"+cond, a
	}
	if actions != "" {
		match = "(" + match + ") OR (true" + actions + ")"
	}
	return where + " AND (" + match + ")", args, nil
}

// SpineEvent is one committed event read from the spine, with its cursor.
type SpineEvent struct {
	Cursor SpineCursor
	Record audit.Record
}

// SpineRead is one read of the spine.
type SpineRead struct {
	// Events are the committed events after the cursor, in spine order.
	Events []SpineEvent
	// Next is the cursor to read on from: the last event's when the read was
	// full (more may be waiting), else a position past every event that was
	// committed when the read ran, so that a filtered reader does not scan
	// again what matched nothing. It is never before the cursor read from.
	Next SpineCursor
	// Horizon is the snapshot's xmin the read stopped at: every transaction
	// with a smaller id had ended.
	Horizon uint64
	// Examined is how many events past the cursor the read looked at,
	// matching or not, when the filter's MaxScan bounded it (0 otherwise).
	Examined int
	// Cut is set when the read looked at MaxScan events without filling its
	// limit and another event follows them below the horizon: Next is then
	// the last event it looked at (read again from Next).
	Cut bool
}

// MaxSpineRead is the most events one read of the spine returns.
const MaxSpineRead = 10000

// MaxSpineScan is the largest SpineFilter.MaxScan.
const MaxSpineScan = 100000

// ReadSpine returns up to limit committed events after the cursor, in spine
// order, in the unit of work of ctx or on the pool. With filter.MaxScan it
// looks at no more than that many events past the cursor (see SpineRead's
// Cut). It returns BAD_USER_INPUT for limit outside 1..MaxSpineRead,
// MaxScan outside 0..MaxSpineScan, or a malformed filter.
func (db *DB) ReadSpine(ctx context.Context, after SpineCursor, filter SpineFilter, limit int) (*SpineRead, error) {
	return readSpine(ctx, db.q(ctx), after, filter, limit)
}

// readSpine is ReadSpine in q. The horizon and the scan are one statement,
// so they share its snapshot: every event of a transaction whose id is below
// the snapshot's xmin is visible in it if that transaction committed, and a
// later read can only find events of transactions at or past the horizon,
// which sort after every cursor this read returns.
func readSpine(ctx context.Context, q Querier, after SpineCursor, filter SpineFilter, limit int) (*SpineRead, error) {
	if limit < 1 || limit > MaxSpineRead {
		return nil, errs.Errorf(errs.CodeBadUserInput, "limit must be from 1 to %d", MaxSpineRead)
	}
	if filter.MaxScan < 0 || filter.MaxScan > MaxSpineScan {
		return nil, errs.Errorf(errs.CodeBadUserInput, "the scan must be from 0 to %d events", MaxSpineScan)
	}
	args := []any{after.TxID, after.Seq}
	where, args, err := filter.where(args)
	if err != nil {
		return nil, err
	}
	// The LEFT JOIN keeps one row, the horizon's, when no event is found.
	var sql string
	bounded := filter.MaxScan > 0
	if !bounded {
		sql = `WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon)
		SELECT h.horizon, e.tx_id, e.seq, ` + auditRecordColumns("e.") + ` FROM h LEFT JOIN LATERAL (
			SELECT tx_id, seq, ` + auditRecordColumns("") + ` FROM audit_events
			WHERE (tx_id, seq) > ($1::xid8, $2::bigint) AND tx_id < h.horizon` + where + `
			ORDER BY tx_id, seq LIMIT ` + strconv.Itoa(limit) + `) e ON true`
	} else {
		// At most MaxScan events past the cursor below the horizon: the
		// first limit kept and, when fewer are, the last event looked at,
		// with whether another follows it below the horizon
		// (boundedScanSQL).
		sql = `WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon)
		SELECT h.horizon, e.tx_id, e.seq, e.rn, e.hit, e.more, ` + auditRecordColumns("e.") + ` FROM h LEFT JOIN LATERAL (
			` + boundedScanSQL(`*`, `SELECT tx_id, seq, `+auditRecordColumns("")+` FROM audit_events
				WHERE (tx_id, seq) > ($1::xid8, $2::bigint) AND tx_id < h.horizon`,
			``, `tx_id, seq`, `true`+where, filter.MaxScan, limit) + `) e ON true`
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read spine: %w", err)
	}
	defer rows.Close()
	out := &SpineRead{}
	var last SpineCursor
	var more bool // another event follows the last looked at
	for rows.Next() {
		var ev SpineEvent
		var rn int64
		hit := true
		// With no event the row is the horizon alone.
		dest := []any{&out.Horizon, nil, nil}
		if bounded {
			dest = append(dest, &rn, &hit, &more)
		}
		rec, found := auditRecordDests(&ev.Record, rows.RawValues(), len(dest))
		if found {
			dest[1], dest[2] = &ev.Cursor.TxID, &ev.Cursor.Seq
		} else if bounded {
			dest[3], dest[4], dest[5] = nil, nil, nil
		}
		if err := rows.Scan(append(dest, rec...)...); err != nil {
			return nil, fmt.Errorf("read spine: %w", err)
		}
		if found && hit {
			out.Events = append(out.Events, ev)
		}
		if found {
			last, out.Examined = ev.Cursor, int(rn)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read spine: %w", err)
	}
	if n := len(out.Events); n < limit && bounded && out.Examined == filter.MaxScan && more {
		out.Next, out.Cut = last, true
		return out, nil
	}
	out.Next = after
	if n := len(out.Events); n == limit {
		out.Next = out.Events[n-1].Cursor
	} else if past := (SpineCursor{TxID: out.Horizon - 1, Seq: math.MaxInt64}); out.Horizon > 0 && after.less(past) {
		out.Next = past
	}
	return out, nil
}
