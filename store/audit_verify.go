package store

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"taskflow/audit"
	"taskflow/errs"
)

// backdateTolerance is how far back occurred_at may run, in chain order,
// between events written in good faith; verification counts the events that
// run back further (AuditVerification.BackdatedEvents). An event's
// occurred_at is its instance's clock (time.Now, not Postgres's now()): read
// when its unit of work ends, in the round trip that commits it
// (UnitOfWork), or when it begins, for the writes recorded in SQL
// (recordNow). Chain order is spine order: the id of the writing
// transaction, assigned at its first write, then the order of inserts, so
// an event B before an event A in the chain can have occurred up to the
// duration of B's unit of work (first write to commit) plus that of A's
// (start to first write) later than A, plus the difference between the two
// instances' clocks. Nothing on the server bounds a unit of work: it sets no
// statement_timeout, lock_timeout nor transaction timeout (a lock wait lasts
// as long as the lock), and the HTTP server's ReadTimeout and WriteTimeout
// do not cancel a running handler (net/http clears the read deadline when
// it starts watching the connection). A request's unit of work runs in the
// request's context, which is cancelled, and its statement with it (pgx),
// when the client goes away: a client or a proxy that gives up after its
// own timeout (nginx's proxy_read_timeout is 60 s by default) ends it; a
// webhook attempt records its outcome within 10 s. A mutation takes
// milliseconds, and instances' clocks kept by NTP differ by milliseconds.
// Two units of work of a minute each and a skew of seconds are about two
// minutes: 5 minutes leaves room for a slow database without flagging its
// events, and an event flagged beyond that was written with a past time, by
// a unit of work that waited minutes (on a lock, for a client that waits
// that long), or by an instance whose clock was minutes behind: each is
// worth an operator's look, none proves tampering, so it does not make the
// log invalid.
const backdateTolerance = 5 * time.Minute

// VerifyAuditLog walks the workspace's hash chain and, when cp is not nil,
// checks that checkpoint against it with the public keys this server trusts
// (keys); see VerifyChainAgainst. A checkpoint with no chain key is taken to
// be the workspace's. It returns UNAUTHENTICATED for no user, NOT_FOUND if
// the workspace does not exist or user is not a member, FORBIDDEN for a
// MEMBER or VIEWER, and BAD_USER_INPUT for a malformed checkpoint or one of
// another chain. pay, when not nil, is given the number of seals the walk
// will read once the chain's head is read, before the walk: an error it
// returns is returned as it is, and nothing more is read (the caller pays
// for the walk: ratelimit.ChargeWork).
func (db *DB) VerifyAuditLog(ctx context.Context, user *User, workspaceID string, cp *audit.Checkpoint, keys []ed25519.PublicKey,
	pay func(seals int64) error,
) (*AuditVerification, error) {
	if err := db.requireAuditReader(ctx, workspaceID, user); err != nil {
		return nil, err
	}
	chain, err := canonicalUUID(&workspaceID)
	if err != nil {
		return nil, notFound("workspace")
	}
	if cp != nil {
		c := *cp
		if len(c.Version) > 64 || len(c.ChainKey) > 64 || len(c.KeyID) > 64 || len(c.HeadHash) > 64 || len(c.Signature) > 128 {
			return nil, errs.Errorf(errs.CodeBadUserInput, "checkpoint: a field is longer than any checkpoint's")
		}
		if c.ChainKey == "" {
			c.ChainKey = *chain
		}
		if c.ChainKey != *chain {
			return nil, errs.Errorf(errs.CodeBadUserInput, "checkpoint: it is a checkpoint of chain %q, not of this workspace", c.ChainKey)
		}
		if _, err := c.Message(); err != nil {
			return nil, errs.Errorf(errs.CodeBadUserInput, "checkpoint: %v", err)
		}
		cp = &c
	}
	return db.verifyChain(ctx, *chain, cp, keys, pay)
}

// VerifyChain is VerifyChainAgainst with no checkpoint.
func (db *DB) VerifyChain(ctx context.Context, chainKey string) (*AuditVerification, error) {
	return db.VerifyChainAgainst(ctx, chainKey, nil, nil)
}

// VerifyChainAgainst walks the hash chain named chainKey (a workspace id,
// "user:<id>" or "anonymous") in one snapshot. It walks the seals by position
// from the first, each joined with its event, and checks that positions
// follow each other, that each seal's prev_hash is the hash before it, that
// its event exists (up to the retention anchor it may be gone, if it is older
// than every monthly partition left, as retention drops the oldest months
// only; an anchor naming an event of a month still kept is forged) and that its
// hash is the hash of the event's canonical encoding over prev_hash; then
// that the head is the last seal, that every event of the chain is sealed
// (by a seal of its id, time and chain) or waiting for the sealer (past its
// cursor, with a transaction id that could be real), and, for a workspace's
// chain, that no event of the workspace is in another chain. The first
// failure is reported:
// an edited event or a forged seal (the event), a deleted event (its id, from
// its seal), a deleted seal (the event after it), the head's event when the
// newest seals are gone, an event no seal covers.
//
// With a checkpoint cp it also checks cp's signature with the key of keys
// that cp names, and that the seal at cp's position has cp's hash in an
// intact chain: a checkpoint with a good signature that the log does not
// extend makes the log invalid (events it covered were removed or
// rewritten, head included).
//
// With keys, every checkpoint the server stored of the chain
// (audit_checkpoints) that one of keys signed must be extended too: a chain
// rewritten from an event on, its seals and head recomputed, is consistent in
// itself, and only a checkpoint signed before shows it. The event at the
// first such checkpoint's position is reported (the newest seal's when the
// log ends before it).
//
// In the same walk it counts the events whose occurred_at is earlier than the
// latest of the events before them in the chain by more than
// backdateTolerance (BackdatedEvents, FirstBackdatedEventID): chain order is
// the order of the writing transactions, so such an event was written with a
// time in the past, or by an instance whose clock was behind. The first event
// it reads, with none before it, is compared with the event just before it
// in spine order, of any chain (chainWalk.firstBackdated). They do not make
// the log invalid.
func (db *DB) VerifyChainAgainst(ctx context.Context, chainKey string, cp *audit.Checkpoint, keys []ed25519.PublicKey) (*AuditVerification, error) {
	return db.verifyChain(ctx, chainKey, cp, keys, nil)
}

// verifyChain is VerifyChainAgainst, calling pay (when not nil) with the
// seals the walk will read before it reads them; pay's error is returned as
// it is.
func (db *DB) verifyChain(ctx context.Context, chainKey string, cp *audit.Checkpoint, keys []ed25519.PublicKey,
	pay func(seals int64) error,
) (*AuditVerification, error) {
	out := &AuditVerification{Valid: true}
	var payErr error
	w := &chainWalk{out: out, keys: keys}
	if cp != nil {
		out.Checkpoint = &AuditCheckpointVerification{Position: cp.Position, KeyID: cp.KeyID}
		w.cp, w.cpReason = cp, checkSignature(cp, keys)
		out.Checkpoint.SignatureValid = w.cpReason == ""
		w.cpHash, _ = hex.DecodeString(cp.HeadHash)
	}
	err := pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := w.readEnds(ctx, tx, chainKey); err != nil {
			return err
		}
		if pay != nil {
			// The seals run from position 1 to the head's (a legacy chain's
			// from after its anchor: fewer).
			var seals int64
			if w.hasHead {
				seals = w.headPos
			}
			if payErr = pay(seals); payErr != nil {
				return payErr
			}
		}
		if err := w.walk(ctx, tx, chainKey); err != nil {
			return err
		}
		return w.finish(ctx, tx, chainKey)
	})
	if payErr != nil {
		return nil, payErr
	}
	if err != nil {
		return nil, fmt.Errorf("verify audit log: %w", err)
	}
	out.CheckedEvents = out.SealedEvents + out.UnsealedEvents
	return out, nil
}

// checkSignature returns why cp's signature does not verify with the key of
// keys it names, or "" when it does.
func checkSignature(cp *audit.Checkpoint, keys []ed25519.PublicKey) string {
	for _, k := range keys {
		if audit.KeyID(k) == cp.KeyID {
			if err := cp.Verify(k); err != nil {
				return err.Error()
			}
			return ""
		}
	}
	return fmt.Sprintf("key %q is not one this server trusts (see auditSigningKeys)", cp.KeyID)
}

// chainWalk is the state of one verification.
type chainWalk struct {
	out *AuditVerification
	// The head, the anchor and the sealer's cursor, read first.
	hasHead     bool
	headHash    []byte
	headEvent   string
	headPos     int64
	anchorHash  []byte
	anchorPos   int64
	anchorEvent string
	anchorAt    time.Time
	// kept is the start of the oldest monthly partition of audit_events
	// (zero: none). Retention drops the oldest months only, so an event at
	// or after it cannot be missing by retention: it was deleted.
	kept   time.Time
	cursor SpineCursor
	// sealerStopped reports that the sealer will reach no event past its
	// cursor: the cursor is gone, or was moved back behind a sealed event.
	// Then no event waits for it: an event without a seal is reported.
	sealerStopped bool
	tipPos        int64
	tipHash       []byte
	tipEvent      string
	// keys are the public keys the server trusts: the checkpoints it stored
	// that one of them signed must be extended by the log.
	keys               []ed25519.PublicKey
	cp                 *audit.Checkpoint
	cpReason           string
	cpHash, cpSealHash []byte
	cpEvent            string
	// latest is the latest occurred_at of the events the walk read so far
	// (backdated).
	latest time.Time
	// firstID and firstAt are the first event the walk read, which no event
	// of the chain precedes (firstBackdated).
	firstID string
	firstAt time.Time
}

// invalid marks the log invalid at event id, unless it already is. An empty
// id (a chain with no seal, anchor or event left to name) leaves
// FirstInvalidEventID null.
func (w *chainWalk) invalid(id string) {
	if w.out.Valid {
		w.out.Valid = false
		if id != "" {
			w.out.FirstInvalidEventID = &id
		}
	}
}

// readEnds reads the chain's head and anchor and the sealer's cursor in one
// round trip.
func (w *chainWalk) readEnds(ctx context.Context, tx pgx.Tx, chainKey string) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT head_hash, event_id::text, events FROM audit_chain_heads WHERE chain_key = $1`, chainKey).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&w.headHash, &w.headEvent, &w.headPos)
			w.hasHead = err == nil
			if auditNoRows(err) {
				return nil
			}
			return err
		})
	b.Queue(`SELECT hash, events, event_id::text, event_at FROM audit_chain_anchors WHERE chain_key = $1`, chainKey).
		QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&w.anchorHash, &w.anchorPos, &w.anchorEvent, &w.anchorAt); err != nil && !auditNoRows(err) {
				return err
			}
			return nil
		})
	b.Queue(`SELECT min(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass AND c.relname LIKE 'audit\_events\_p%'`).
		QueryRow(func(row pgx.Row) error {
			var name *string
			if err := row.Scan(&name); err != nil {
				return err
			}
			if name != nil {
				if m, err := time.Parse("200601", strings.TrimPrefix(*name, "audit_events_p")); err == nil {
					w.kept = m
				}
			}
			return nil
		})
	// The sealer's cursor, and whether it stopped: the cursor is gone (the
	// server's role may delete it), or it lies before a sealed event among
	// the batch its next round reads (moved back: that round would seal
	// sealed events again, and fails). Seals and the cursor move in one
	// transaction, so neither happens while the sealer works. (One probe of
	// the seals' event_id index for each event of the backlog, up to a
	// batch; LATERAL with LIMIT keeps it so.)
	b.Queue(`SELECT c.tx_id, c.seq, EXISTS (SELECT 1 FROM
			(SELECT e.id, e.occurred_at FROM audit_events e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq)
				ORDER BY e.tx_id, e.seq LIMIT ` + fmt.Sprint(DefaultSealBatch) + `) x
			CROSS JOIN LATERAL (SELECT 1 FROM audit_seals s WHERE s.event_id = x.id AND s.occurred_at = x.occurred_at LIMIT 1) s)
		FROM audit_seal_cursor c WHERE c.id = 1`).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&w.cursor.TxID, &w.cursor.Seq, &w.sealerStopped)
			if auditNoRows(err) {
				w.sealerStopped = true
				return nil
			}
			return err
		})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	w.tipPos, w.tipHash, w.tipEvent = w.anchorPos, w.anchorHash, w.anchorEvent
	if w.hasHead {
		w.out.HeadHash = hexHash(w.headHash)
		w.out.HeadPosition = &w.headPos
	}
	return nil
}

// walk streams all the chain's seals by position, each with its event.
// Retention drops events, never seals, so the seals run from position 1,
// each linked to the one before; only a chain whose events retention
// dropped before there were seals (migration 0007) starts after its anchor,
// from the anchor's hash. The walk starts at 1 even with an anchor: an
// anchor written by hand must not hide the seals, and the events still
// there, below it.
func (w *chainWalk) walk(ctx context.Context, tx pgx.Tx, chainKey string) error {
	rows, err := tx.Query(ctx, `SELECT `+sealedEventColumns+` FROM `+sealedEventsFrom+`
		WHERE s.chain_key = $1 ORDER BY s.position`, chainKey)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		x        sealedEvent
		last     int64
		expected []byte
		first    = true
	)
	for rows.Next() {
		if err := x.scan(rows); err != nil {
			return err
		}
		pos, prev, hash, id, at, found := x.pos, x.prev, x.hash, x.id, x.at, x.found
		if first && pos != 1 && w.anchorPos > 0 && pos == w.anchorPos+1 {
			last, expected = w.anchorPos, w.anchorHash // a legacy chain: its seals begin after its anchor
		}
		// A seal at or before the anchor is of an event retention may have
		// dropped: without its event only its place in the chain is checked;
		// with it, its hash too (an anchor written by hand must not hide an
		// edited event that is still there).
		retained := pos <= w.anchorPos
		switch {
		case pos != last+1:
			w.invalid(id) // a seal is missing before this one
		case !bytes.Equal(prev, expected):
			w.invalid(id)
		case retained && pos == w.anchorPos && !bytes.Equal(hash, w.anchorHash):
			w.invalid(id)
		case retained && !found && w.droppable(at):
			// Dropped with its month by retention.
		case !found:
			w.invalid(id) // the event is gone (or was moved)
		default:
			if !x.recomputes() {
				w.invalid(id)
			}
		}
		if !retained && found {
			w.out.SealedEvents++
		}
		if found {
			w.backdated(id, at)
		}
		if w.cp != nil && pos == w.cp.Position {
			w.cpSealHash, w.cpEvent = bytes.Clone(hash), id
		}
		last, expected, first = pos, bytes.Clone(hash), false
		w.tipPos, w.tipHash, w.tipEvent = pos, expected, id
	}
	return rows.Err()
}

// backdated counts the event id, which occurred at at and comes next in
// chain order, when at is earlier than the latest time of the events before
// it by more than backdateTolerance (see AuditVerification.BackdatedEvents),
// and makes at the latest when it is.
func (w *chainWalk) backdated(id string, at time.Time) {
	if w.firstID == "" {
		w.firstID, w.firstAt = id, at // nothing before it in the chain: firstBackdated
	}
	if w.latest.Sub(at) > backdateTolerance {
		w.out.BackdatedEvents++
		if w.out.FirstBackdatedEventID == nil {
			w.out.FirstBackdatedEventID = &id
		}
	}
	if at.After(w.latest) {
		w.latest = at
	}
}

// spinePredecessorSQL reads the occurred_at of the event just before the
// event $1 (occurred at $2, of chain $3) in spine order, of any chain: one
// probe of the spine index of each partition. An event without a tx_id (one
// written before the spine, migration 0007) has none.
const spinePredecessorSQL = `SELECT p.occurred_at FROM audit_events e CROSS JOIN LATERAL
	(SELECT p.occurred_at FROM audit_events p WHERE (p.tx_id, p.seq) < (e.tx_id, e.seq)
		ORDER BY p.tx_id DESC, p.seq DESC LIMIT 1) p
	WHERE e.id = $1::uuid AND e.occurred_at = $2 AND e.chain_key = $3`

// firstBackdated counts the first event the walk read (firstID), which no
// event of its chain precedes and backdated therefore never counts, when its
// occurred_at is earlier than before's, the event just before it in spine
// order of whatever chain (spinePredecessorSQL; null when none), by more than
// backdateTolerance; it is then the first backdated event in chain order.
//
// Spine order, (tx_id, seq), is the order of the writing transactions across
// every chain, and chain order is spine order within a chain: the reasoning
// of backdateTolerance (two units of work and the instances' clocks) never
// used the chain, so it bounds how far occurred_at runs back between any two
// events in spine order, and comparing with an event of another chain can
// flag no honest event that comparing within the chain would not. Only the
// one event just before is read (the latest of all those before is no
// cheaper to find than a walk of the spine): on a busy log it was written
// moments before, on a quiet one it may be old, and a first event backdated
// to after it is not seen.
//
// The seal's sealed_at is not the yardstick: an honest event waits for the
// sealer as long as the sealer is stopped (its cursor gone until an operator
// restores it, every instance down, a backlog), so sealed_at can be hours
// after occurred_at with nothing wrong, and a tolerance wide enough for that
// would miss every backdating shorter than the longest outage. Nor is the
// sealing round: the events a round seals are those committed since the
// last, over any length of time.
func (w *chainWalk) firstBackdated(before pgtype.Timestamptz) {
	if !before.Valid || before.Time.Sub(w.firstAt) <= backdateTolerance {
		return
	}
	w.out.BackdatedEvents++
	w.out.FirstBackdatedEventID = &w.firstID
}

// sealedEventsFrom joins each seal s to its event e (its id, time and
// chain; e's columns are null when it is gone), and sealedEventColumns are
// what sealedEvent.scan reads of them: the walk of verification and the
// sealer's check before it signs a head read seals so.
const sealedEventsFrom = `audit_seals s LEFT JOIN audit_events e
	ON e.occurred_at = s.occurred_at AND e.id = s.event_id AND e.chain_key = s.chain_key`

var sealedEventColumns = `s.position, s.prev_hash, s.hash, s.event_id::text, s.occurred_at, ` + auditRecordColumns("e.")

// sealedEvent is a seal and its event, read by scan.
type sealedEvent struct {
	pos        int64
	prev, hash []byte
	id         string
	at         time.Time
	r          audit.Record
	// found reports that the event is there (r is read).
	found bool
}

// scan reads a row whose columns are dests then sealedEventColumns.
func (x *sealedEvent) scan(rows pgx.Rows, dests ...any) error {
	rec, found := auditRecordDests(&x.r, rows.RawValues(), len(dests)+5)
	x.found = found
	return rows.Scan(append(append(dests, &x.pos, &x.prev, &x.hash, &x.id, &x.at), rec...)...)
}

// recomputes reports whether the seal's hash is the hash of its event's
// canonical encoding over its prev_hash (audit.Hash), as the sealer computed
// it: false for a seal whose event is gone, was edited, or whose hash was
// forged.
func (x *sealedEvent) recomputes() bool {
	if !x.found {
		return false
	}
	sum, err := audit.Hash(x.prev, x.r)
	return err == nil && bytes.Equal(sum, x.hash)
}

// droppable reports whether retention may have dropped an event that
// occurred at at: whether at is before every monthly partition left.
// Retention drops the oldest months first and stops at the first it keeps,
// and never drops the DEFAULT partition.
func (w *chainWalk) droppable(at time.Time) bool {
	return !w.kept.IsZero() && at.Before(w.kept)
}

// finish counts the events waiting for the sealer, looks for an event that
// no seal covers, checks the head and the checkpoint.
func (w *chainWalk) finish(ctx context.Context, tx pgx.Tx, chainKey string) error {
	// Events past the sealer's cursor wait for it; every other event of the
	// chain must have a seal of its own: its id, time and chain (the events'
	// key is the time and the id, so an id alone could be a sealed event's
	// copy). A row with no tx_id or seq is never read by the sealer, and a
	// tx_id at or past the snapshot's xmax no transaction could have had yet
	// (a committed event's is below it): neither counts as waiting, nor does
	// any event when the sealer stopped ($4 false).
	const pending = `coalesce($4::bool AND (e.tx_id, e.seq) > ($2::xid8, $3::bigint)
		AND e.tx_id < pg_snapshot_xmax(pg_current_snapshot()), false)`
	var stray, elsewhere *string
	scanID := func(dst **string) func(row pgx.Row) error {
		return func(row pgx.Row) error {
			if err := row.Scan(dst); err != nil && !auditNoRows(err) {
				return err
			}
			return nil
		}
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT count(*) FROM audit_events e WHERE e.chain_key = $1 AND `+pending, chainKey, w.cursor.TxID, w.cursor.Seq, !w.sealerStopped).
		QueryRow(func(row pgx.Row) error { return row.Scan(&w.out.UnsealedEvents) })
	b.Queue(`SELECT e.id::text FROM audit_events e WHERE e.chain_key = $1 AND NOT `+pending+`
		AND NOT EXISTS (SELECT 1 FROM audit_seals s
			WHERE s.event_id = e.id AND s.occurred_at = e.occurred_at AND s.chain_key = e.chain_key)
		ORDER BY e.occurred_at, e.id LIMIT 1`, chainKey, w.cursor.TxID, w.cursor.Seq, !w.sealerStopped).
		QueryRow(scanID(&stray))
	if validID(chainKey) {
		// A workspace's chain: the workspace's events are read by their
		// workspace_id (auditEvents, the export), so one in another chain
		// would be read as the workspace's and never verified.
		b.Queue(`SELECT e.id::text FROM audit_events e WHERE e.workspace_id = $1::uuid AND e.chain_key <> $2::text
			ORDER BY e.occurred_at, e.id LIMIT 1`, chainKey, chainKey).QueryRow(scanID(&elsewhere))
	}
	var before pgtype.Timestamptz
	if w.firstID != "" {
		b.Queue(spinePredecessorSQL, w.firstID, w.firstAt, chainKey).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&before); err != nil && !auditNoRows(err) {
				return err
			}
			return nil
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	w.firstBackdated(before)
	if stray == nil {
		stray = elsewhere
	}
	unextended, err := w.storedCheckpoints(ctx, tx, chainKey)
	if err != nil {
		return err
	}
	switch {
	case !w.out.Valid:
	case w.anchorPos > 0 && !w.droppable(w.anchorAt):
		// An anchor names the newest event of a month retention dropped:
		// one of a month still there was written by hand (over seals
		// removed with their events, or the walk found it first).
		w.invalid(w.anchorEvent)
	case !w.hasHead && w.tipPos > w.anchorPos:
		w.invalid(w.tipEvent) // seals with no head: the chain's end is not vouched for
	case w.hasHead && (w.headPos != w.tipPos || !bytes.Equal(w.headHash, w.tipHash)):
		w.invalid(w.headEvent) // the newest seals are missing, or the head was changed
	case stray != nil:
		w.invalid(*stray)
	case unextended != nil:
		w.invalid(*unextended)
	}
	w.checkpoint()
	return nil
}

// storedCheckpoints looks for a checkpoint of the chain in audit_checkpoints,
// signed by one of the trusted keys, that the log does not extend: whose
// position has no seal, or a seal of another hash. It returns the event at
// that position (the newest seal's when the position is past the end), or
// nil when every such checkpoint is extended. The server signed each of them
// of the chain's head at the time: a chain rewritten since, its seals and head
// recomputed, is consistent in itself, and only a checkpoint from before
// shows it (this one, or one a customer kept). A row whose signature does not
// verify proves nothing and is skipped: the server's role may insert rows.
// Where the walk found the chain broken already, no row is read.
func (w *chainWalk) storedCheckpoints(ctx context.Context, tx pgx.Tx, chainKey string) (*string, error) {
	if len(w.keys) == 0 || !w.out.Valid {
		return nil, nil
	}
	ids := make([]string, len(w.keys))
	byID := make(map[string]ed25519.PublicKey, len(w.keys)) // a row's key found by its id, not by trying each key
	for i, k := range w.keys {
		ids[i] = audit.KeyID(k)
		byID[ids[i]] = k
	}
	rows, err := tx.Query(ctx, `SELECT c.position, c.head_hash, c.signed_at, c.key_id, c.signature, s.event_id::text
		FROM audit_checkpoints c LEFT JOIN audit_seals s ON s.chain_key = c.chain_key AND s.position = c.position
		WHERE c.chain_key = $1 AND c.key_id = ANY($2::text[]) AND s.hash IS DISTINCT FROM c.head_hash
		ORDER BY c.position, c.key_id`, chainKey, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var position int64
		var signedAt time.Time
		var keyID string
		var hash, sig []byte
		var event *string
		if err := rows.Scan(&position, &hash, &signedAt, &keyID, &sig, &event); err != nil {
			return nil, err
		}
		cp := checkpointOfRow(chainKey, position, hash, signedAt, keyID, sig)
		if cp.Verify(byID[keyID]) != nil { // the query read only keys' ids
			continue
		}
		if event == nil {
			event = &w.tipEvent
		}
		return event, nil
	}
	return nil, rows.Err()
}

// checkpoint records whether the log extends the checkpoint presented.
func (w *chainWalk) checkpoint() {
	cv := w.out.Checkpoint
	if cv == nil {
		return
	}
	reason := w.cpReason
	intact := w.out.Valid
	switch {
	case w.cpSealHash == nil:
		reason = join(reason, fmt.Sprintf("the log has no seal at position %d (it ends at %d): events the checkpoint covers are gone",
			w.cp.Position, w.tipPos))
	case !bytes.Equal(w.cpSealHash, w.cpHash):
		reason = join(reason, fmt.Sprintf("the seal at position %d does not have the checkpoint's hash: the log was rewritten", w.cp.Position))
	case !intact:
		reason = join(reason, "the chain is broken (see firstInvalidEventId)")
	default:
		cv.Extended = true
	}
	cv.Valid = cv.SignatureValid && cv.Extended
	if !cv.Valid {
		cv.Reason = &reason
	}
	if cv.SignatureValid && !cv.Extended && intact {
		// A genuine checkpoint the log does not extend: tampering, at the
		// event of its position, or the newest seal's when the log ends
		// before it (as for a stored checkpoint).
		if w.cpEvent != "" {
			w.invalid(w.cpEvent)
		} else {
			w.invalid(w.tipEvent)
		}
	}
}

// join joins two reasons with "; ", skipping an empty one.
func join(a, b string) string {
	return strings.TrimPrefix(strings.Join([]string{a, b}, "; "), "; ")
}
