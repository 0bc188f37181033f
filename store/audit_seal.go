package store

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"taskflow/audit"
	"taskflow/errs"
)

// Defaults of AuditSealer.
const (
	// DefaultSealBatch is the most events one round seals.
	DefaultSealBatch = 1000
	// DefaultSealIdle is how often an idle sealer looks for events committed
	// by other instances (its own instance wakes it at once).
	DefaultSealIdle = 100 * time.Millisecond
	// DefaultSealGap is the least time between two rounds that sealed events
	// (unless the first was full): under a write load, one round chains the
	// events of many commits instead of a transaction for each (measured in
	// docs/decisions/2026-12-01-audit-sealer.md, addendum of 2026-12-02).
	DefaultSealGap = 50 * time.Millisecond
	// DefaultCheckpointEvery is the least time between two checkpoints of a
	// chain.
	DefaultCheckpointEvery = 10 * time.Second
)

// ErrSealCursorMissing is returned by AuditSealer.Round and AuditSealBacklog
// when the sealer's cursor, row 1 of audit_seal_cursor (made by migration
// 0007), is gone: the server's database role may delete it. Nothing is sealed
// until an operator restores it (docs/operations.md); the sealer does not
// make it again, as a cursor anywhere but after the newest sealed event would
// seal events a second time or skip some.
var ErrSealCursorMissing = errs.Errorf(errs.CodeInternal,
	"the audit sealer's cursor (row id = 1 of audit_seal_cursor) is missing: nothing is sealed until it is restored (docs/operations.md)")

// AuditSealer chains committed audit events into their hash chains, in spine
// order, shortly after they commit: the request path only inserts them. Every
// instance runs one (Run); the sealing transaction locks the one cursor row
// with SKIP LOCKED, so one sealer advances at a time and the others skip the
// round, and no lock outlives a transaction (PgBouncer in transaction mode
// stays possible). With a Key it also signs checkpoints of the chains it
// advanced, at most every CheckpointEvery per chain.
type AuditSealer struct {
	DB *DB
	// Key signs checkpoints; nil signs none. Set it before the sealer's
	// first round or Checkpoint and do not change it: its public key and id
	// are computed once (signer).
	Key ed25519.PrivateKey
	// CheckpointEvery is the least time between two checkpoints of a chain
	// (zero: DefaultCheckpointEvery).
	CheckpointEvery time.Duration
	// Batch is the most events a round seals (zero: DefaultSealBatch).
	Batch int
	// Idle is the poll interval when no wake-up comes (zero: DefaultSealIdle).
	Idle time.Duration
	// Gap is the least time between two rounds that sealed events (zero:
	// DefaultSealGap).
	Gap time.Duration

	// signerOnce computes pub and keyID, Key's public key and its id
	// (signer).
	signerOnce sync.Once
	pub        ed25519.PublicKey
	keyID      string
	// lastSweep is when this sealer last looked for chains whose newest
	// seals no checkpoint covers, and sweepAfter the chain key its next
	// sweep reads after ("": from the first).
	lastSweep  time.Time
	sweepAfter string
	// mu guards signed, verified and withheldAt.
	mu sync.Mutex
	// signed is the last checkpoint this sealer signed of each chain (up to
	// maxRemembered chains): what it signs next must extend it even when
	// its row in audit_checkpoints was removed.
	signed map[string]signedHead
	// verified is, of each chain (up to maxRemembered), the newest
	// position up to which this sealer found the seals since a checkpoint
	// to recompute from their events, and the hash there (recompute).
	verified map[string]signedHead
	// withheld counts the checkpoints not signed because the chain does
	// not extend the last one signed, or does not recompute
	// (WithheldCheckpoints): each once (withheldAt).
	withheld atomic.Uint64
	// withheldAt is, of each chain withheld since this sealer last signed
	// it (up to maxRemembered), the position of the last checkpoint it
	// failed to extend or recompute from (0: none signed), counted once in
	// withheld: a round that finds the chain withheld against the same
	// checkpoint again does not count it again.
	withheldAt map[string]int64
	// blocked counts the checkpoints signed but not stored because another
	// row held their key in audit_checkpoints (BlockedCheckpoints).
	blocked atomic.Uint64
}

// maxRemembered is how many chains' last checkpoints a sealer remembers
// (about 150 bytes each); past it one is forgotten for each new one, and
// the stored row of a forgotten chain's checkpoint is what it checks.
const maxRemembered = 100_000

// signedHead is a chain's position and hash that a checkpoint signed, or
// up to which its seals were found to recompute, and the position of the
// chain's last checkpoint then (what the logs name: a stored checkpoint at
// or below position is not read again).
type signedHead struct {
	position int64
	hash     []byte
	last     int64
}

// WithheldCheckpoints returns how many checkpoints this sealer withheld: a
// chain whose head it did not sign because the chain no longer extends the
// last checkpoint signed of it (the seal at that checkpoint's position has
// another hash, a link after it is broken, or the head is before it) or a
// seal since does not recompute from its event (withhold). A chain withheld
// stays due, and every round that would sign it (each sweep, each round
// that seals its new events) and each Checkpoint finds it again and logs it
// at ERROR; it counts once, at the first of them that committed (a round
// that failed after finding so counts and logs nothing: the one that runs
// again does), for as long as it fails against the same last checkpoint. A
// chain repaired is signed again; tampered anew after that, it fails
// against its new checkpoint and counts again (as it does when a newer
// checkpoint of its own key appears that it does not extend either, or when
// this sealer forgot it among more than maxRemembered chains withheld). So
// the count is of tamperings found, not of rounds. Each sealer (instance)
// counts for itself, from its start: every instance's sweep meets a chain
// withheld, so a tampering counts once on each instance that found it. The
// server exports it as taskflow_audit_checkpoints_withheld_total.
func (s *AuditSealer) WithheldCheckpoints() uint64 {
	return s.withheld.Load()
}

// BlockedCheckpoints returns how many checkpoints this sealer signed but
// could not store because a row of audit_checkpoints already held their key
// (chain, position, key id) and was not a checkpoint of the same head signed
// by its key: a row inserted by someone with write access to the database,
// where the sealer's checkpoint was to go, counted and logged at ERROR as
// WithheldCheckpoints counts (a round once it committed). A round signs at
// most one checkpoint of a chain, and marks the chain's head signed at the
// position blocked, which no round signs again: a round counts the chains it
// found blocked, each once, and a chain counts again only when a later
// checkpoint of it, at another position, is blocked too (or Checkpoint is
// called again at the same one). The server exports it as
// taskflow_audit_checkpoints_blocked_total.
func (s *AuditSealer) BlockedCheckpoints() uint64 {
	return s.blocked.Load()
}

// sealFindings are what a round, or Checkpoint, found wrong with the chains
// it was to sign: the checkpoints withheld (withhold) and blocked
// (reportBlocked), and the ERROR lines that say so. They are logged and
// counted once the outcome is final (report): a round once it committed, so
// that a round that failed and runs again reports them once.
type sealFindings struct {
	// withheld are the chains withheld and the position of the last
	// checkpoint each fails against (withheldAt).
	withheld []withheldChain
	blocked  int
	errors   []sealError
}

// withheldChain is a chain withheld and the position of the last checkpoint
// it does not extend or recompute from.
type withheldChain struct {
	chain string
	last  int64
}

// sealError is an ERROR line of the sealer, its message and attributes.
type sealError struct {
	msg  string
	args []any
}

// error adds an ERROR line.
func (f *sealFindings) error(msg string, args ...any) {
	f.errors = append(f.errors, sealError{msg: msg, args: args})
}

// report logs f's ERROR lines and counts its checkpoints blocked, and
// those withheld that it did not count before (withheldAt).
func (s *AuditSealer) report(ctx context.Context, f *sealFindings) {
	for _, e := range f.errors {
		s.DB.log.ErrorContext(ctx, e.msg, e.args...)
	}
	s.blocked.Add(uint64(f.blocked))
	if len(f.withheld) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.withheldAt == nil {
		s.withheldAt = map[string]int64{}
	}
	for _, w := range f.withheld {
		if last, ok := s.withheldAt[w.chain]; ok && last == w.last {
			continue // the same tampering, found again
		}
		rememberIn(s.withheldAt, w.chain, w.last)
		s.withheld.Add(1)
	}
}

// SealRound is what one round of a sealer did.
type SealRound struct {
	// Busy reports that another sealer held the cursor: nothing was done.
	Busy bool
	// Events is the number of events sealed, in Chains chains.
	Events, Chains int
	// Checkpoints is the number of checkpoints signed.
	Checkpoints int
	// Full reports that the round sealed a whole batch: more may be waiting.
	Full bool
	// Cursor is the sealer's cursor after the round; zero when the round
	// only looked (nothing was waiting).
	Cursor SpineCursor
	// MaxLag is the longest time from an event's occurrence to its seal in
	// the round.
	MaxLag time.Duration
}

// chainHead is a chain's head as the sealer keeps it.
type chainHead struct {
	hash     []byte
	eventID  string
	eventAt  time.Time
	position int64
	// startPos and startHash are the head as read, before this round's
	// seals: the newest seal in audit_seals.
	startPos      int64
	startHash     []byte
	checkpointPos int64
	checkpointAt  pgtype.Timestamptz
	// checkpointKey is the key id of the checkpoint at checkpointPos
	// (NULL: none, or signed before the column existed with none stored).
	checkpointKey pgtype.Text
	// changed marks a head to write back.
	changed bool
	// unvouched marks a head read from audit_chain_heads that the seal at
	// its position does not vouch for (none there, or of another hash): the
	// table is not append-only, so the server's role can write any head in
	// it. Such a head is never signed, nor what a round chains over it (the
	// seals it writes then name the forged hash as prev_hash, which
	// verification reports).
	unvouched bool
}

// headVouchedSQL is true for a row h of audit_chain_heads that the seal at
// its position vouches for: audit_seals is append-only and holds one seal a
// position, so a checkpoint signed of such a head names a seal that is there.
const headVouchedSQL = `EXISTS (SELECT 1 FROM audit_seals s
	WHERE s.chain_key = h.chain_key AND s.position = h.events AND s.hash = h.head_hash)`

// signer returns the public key of Key and its id (audit.KeyID, a SHA-256
// of it), computed at the first call: what each round compares and signs
// with. Call it only when Key is set.
func (s *AuditSealer) signer() (ed25519.PublicKey, string) {
	s.signerOnce.Do(func() {
		s.pub = s.Key.Public().(ed25519.PublicKey)
		s.keyID = audit.KeyID(s.pub)
	})
	return s.pub, s.keyID
}

func (s *AuditSealer) batch() int {
	if s.Batch > 0 {
		return min(s.Batch, MaxSpineRead)
	}
	return DefaultSealBatch
}

func (s *AuditSealer) every() time.Duration {
	if s.CheckpointEvery > 0 {
		return s.CheckpointEvery
	}
	return DefaultCheckpointEvery
}

func (s *AuditSealer) idle() time.Duration {
	if s.Idle > 0 {
		return s.Idle
	}
	return DefaultSealIdle
}

func (s *AuditSealer) gap() time.Duration {
	if s.Gap > 0 {
		return s.Gap
	}
	return DefaultSealGap
}

// Run seals until ctx ends: a round at once after a full one, else after a
// wake-up from this instance's units of work or after Idle, and not before
// Gap after a round that sealed events. Errors are logged and retried after a
// backoff that grows to 30 s.
func (s *AuditSealer) Run(ctx context.Context) {
	RunSpineConsumer(ctx, s.DB, "audit sealer", s.DB.sealWake, s.idle(), s.gap(), func(ctx context.Context) (bool, bool, error) {
		r, err := s.Round(ctx)
		return r.Events > 0, r.Full, err
	})
}

// sealPendingSQL tells whether the sealer's cursor exists and whether
// committed events wait past it, without a lock or a transaction id: an idle
// sealer's poll writes nothing.
var sealPendingSQL = spineLookSQLFor("audit_seal_cursor")

// spineLookSQLFor returns the statement lookSpineCursor runs for the spine
// consumer whose cursor is row 1 of cursorTable: whether the row exists, and
// whether committed events wait past it (spinePendingSQLFor).
func spineLookSQLFor(cursorTable string) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + cursorTable + ` WHERE id = 1), (` + spinePendingSQLFor(cursorTable) + `)`
}

// lookSpineCursor runs look (spineLookSQLFor of a consumer's cursor table)
// and reports whether committed events wait past the cursor. It returns
// missing when the cursor row does not exist: no event would ever look
// pending then, and the consumer would stop without a word.
func lookSpineCursor(ctx context.Context, db *DB, look string, missing error) (pending bool, err error) {
	var cursor bool
	if err := db.Pool.QueryRow(ctx, look).Scan(&cursor, &pending); err != nil {
		return false, err
	}
	if !cursor {
		return false, missing
	}
	return pending, nil
}

// spinePendingSQLFor returns the statement that tells whether committed
// events wait past the cursor of a spine consumer, kept in row 1 of the table
// cursorTable (tx_id, seq).
// (LATERAL, ORDER BY and LIMIT make it one probe of the spine index of each
// partition; a plain join with the cursor row scans the whole table.)
func spinePendingSQLFor(cursorTable string) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + cursorTable + ` c CROSS JOIN LATERAL
	(SELECT 1 FROM audit_events e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq)
		AND e.tx_id < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY e.tx_id, e.seq LIMIT 1) x
	WHERE c.id = 1)`
}

// lockSpineCursor locks row 1 of cursorTable, a spine consumer's cursor, for
// the rest of tx and returns it, or reports busy when another transaction
// holds it (SKIP LOCKED: one consumer advances at a time, the others skip
// their round). It returns missing when the row does not exist (SKIP LOCKED
// reads no row then either: a plain read tells the two apart, as a row lock
// does not stop it).
func lockSpineCursor(ctx context.Context, tx pgx.Tx, cursorTable string, missing error) (cur SpineCursor, busy bool, err error) {
	err = tx.QueryRow(ctx, `SELECT tx_id, seq FROM `+cursorTable+` WHERE id = 1 FOR UPDATE SKIP LOCKED`).Scan(&cur.TxID, &cur.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+cursorTable+` WHERE id = 1)`).Scan(&exists); err != nil {
			return cur, false, fmt.Errorf("lock %s: %w", cursorTable, err)
		}
		if !exists {
			return cur, false, missing
		}
		return cur, true, nil
	}
	if err != nil {
		return cur, false, fmt.Errorf("lock %s: %w", cursorTable, err)
	}
	return cur, false, nil
}

// SealBacklog is what waits for the sealer.
type SealBacklog struct {
	// Events is the number of events past the sealer's cursor (committed,
	// or in transactions still open).
	Events int
	// Oldest is the earliest occurrence among them (zero when none).
	Oldest time.Time
}

// AuditSealBacklog returns the events the sealer has not reached yet: its lag,
// for monitoring and for tests that wait for it. It returns
// ErrSealCursorMissing (wrapped) when the sealer has no cursor: then it
// reaches none of them.
func (db *DB) AuditSealBacklog(ctx context.Context) (SealBacklog, error) {
	var b SealBacklog
	var oldest pgtype.Timestamptz
	var cursor bool
	err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_seal_cursor WHERE id = 1), b.n, b.oldest FROM
		(SELECT count(*) AS n, min(x.occurred_at) AS oldest FROM audit_seal_cursor c CROSS JOIN LATERAL
		(SELECT e.occurred_at FROM audit_events e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq)) x WHERE c.id = 1) b`).
		Scan(&cursor, &b.Events, &oldest)
	if err == nil && !cursor {
		err = ErrSealCursorMissing
	}
	if err != nil {
		return SealBacklog{}, fmt.Errorf("audit seal backlog: %w", err)
	}
	b.Oldest = oldest.Time
	return b, nil
}

// Round runs one sealing transaction: it locks the cursor (or returns Busy
// when another sealer holds it), reads up to Batch committed events past it
// (ReadSpine), hashes each over its chain's head, inserts the seals, moves the
// heads and the cursor, signs the checkpoints that are due, and commits. When
// no event waits and no checkpoint sweep is due, it only looks (one read, no
// transaction). A round that fails or is cut off changes nothing; the next
// one starts from the same cursor. Without a cursor (row 1 of
// audit_seal_cursor deleted) it returns ErrSealCursorMissing (wrapped), at
// every round, and seals nothing.
func (s *AuditSealer) Round(ctx context.Context) (SealRound, error) {
	return s.round(ctx, DefaultVerifyBudget, s.batch())
}

// round is Round, reading about budget seals at most to check the chains it
// signs (withhold), and page chains at most in a checkpoint sweep.
func (s *AuditSealer) round(ctx context.Context, budget int64, page int) (SealRound, error) {
	var out SealRound
	if s.Key == nil || time.Since(s.lastSweep) < s.every() {
		pending, err := lookSpineCursor(ctx, s.DB, sealPendingSQL, ErrSealCursorMissing)
		if err != nil {
			return out, fmt.Errorf("audit seal: %w", err)
		}
		if !pending {
			return out, nil
		}
	}
	var w *sealWrites
	var sweep bool
	var sweepAfter string
	// found is reported once the round committed: a round that failed and
	// runs again reports it once.
	var found sealFindings
	err := pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error {
		found = sealFindings{}
		cur, busy, err := lockSpineCursor(ctx, tx, "audit_seal_cursor", ErrSealCursorMissing)
		if busy || err != nil {
			out.Busy = busy
			return err
		}
		out.Cursor = cur
		read, err := readSpine(ctx, tx, cur, SpineFilter{}, s.batch())
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		sweep = s.Key != nil && now.Sub(s.lastSweep) >= s.every()
		if len(read.Events) == 0 && !sweep {
			return nil
		}
		heads, err := s.readHeads(ctx, tx, read.Events)
		if err != nil {
			return err
		}
		w = &sealWrites{sealedAt: now}
		for _, ev := range read.Events {
			h := heads[ev.Record.ChainKey]
			hash, err := audit.Hash(h.hash, ev.Record)
			if err != nil {
				return fmt.Errorf("seal event %s: %w", ev.Record.ID, err)
			}
			w.seal(ev.Record, h, hash)
			h.hash, h.eventID, h.eventAt = hash, ev.Record.ID, ev.Record.OccurredAt
			h.position++
			h.changed = true
			out.MaxLag = max(out.MaxLag, now.Sub(ev.Record.OccurredAt))
		}
		if sweep {
			if sweepAfter, err = s.sweep(ctx, tx, heads, now, page); err != nil {
				return err
			}
		}
		due := map[string]*chainHead{}
		var keyID string // of the checkpoints this sealer signs
		if s.Key != nil {
			_, keyID = s.signer()
		}
		for key, h := range heads {
			if h.unvouched && s.Key != nil {
				found.error("audit sealer: a chain's head is not its newest seal (audit_chain_heads was changed): not signed; verify the chain",
					"chain", key, "position", h.position)
			}
			if s.Key != nil && !h.unvouched && (h.checkpointPos < h.position || h.checkpointKey.String != keyID) &&
				(!h.checkpointAt.Valid || now.Sub(h.checkpointAt.Time) >= s.every()) {
				due[key] = h
			}
		}
		if err := s.withhold(ctx, tx, due, budget, &found); err != nil {
			return err
		}
		for key, h := range heads {
			if due[key] != nil {
				w.checkpoint(s.Key, key, h, now)
				out.Checkpoints++
			}
			if h.changed {
				w.head(key, h)
			}
		}
		if len(read.Events) > 0 {
			out.Events, out.Chains, out.Full = len(read.Events), len(w.heads.key), len(read.Events) == s.batch()
			out.Cursor = read.Next
			w.cursor = &read.Next
		}
		if err := w.send(ctx, tx); err != nil {
			return err
		}
		s.reportBlocked(w, &found)
		out.Checkpoints -= found.blocked
		return nil
	})
	if err != nil {
		return SealRound{}, fmt.Errorf("audit seal: %w", err)
	}
	s.report(ctx, &found)
	if sweep && w != nil {
		s.lastSweep, s.sweepAfter = w.sealedAt, sweepAfter
	}
	s.remember(w)
	return out, nil
}

// extendSQL checks, for each chain ($1) whose head a sealer is about to
// sign, that the chain extends the last checkpoint signed of it: the newer
// of the one the sealer remembers ($2 position, $3 hash; null when none) and
// the newest in audit_checkpoints of the sealer's key ($7) below $6 (a row
// whose signature did not verify is skipped so) and above both positions the
// sealer remembers ($2, $8): one at or below them is not read, nor its
// signature checked again, at each round. It reads the seals from
// the newest of that checkpoint's position and the position up to which the
// sealer found the seals to recompute ($8, hash $9; null when none), at
// most $10 past it (null: no limit), up to the head read at the start of the
// round ($4 position, $5 hash), and returns, with that newest row, the first
// and last positions read (the first is 0 when nothing was signed nor
// verified: then the seals are read from the chain's first), how many seals
// there are and the first whose link to the seal before it (prev_hash), or
// whose hash where a checkpoint, the verified position or the head names
// one, is wrong. (One range of the seals' primary key a chain; GREATEST and
// LEAST skip a null.)
const extendSQL = `SELECT u.i, c.position, c.head_hash, c.signed_at, c.signature, r.a, r.b, l.seals, l.broken
	FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::bigint[], $5::bytea[], $6::bigint[], $8::bigint[], $9::bytea[])
		WITH ORDINALITY AS u(k, mp, mh, t, th, below, vp, vh, i)
	LEFT JOIN LATERAL (SELECT position, head_hash, signed_at, signature FROM audit_checkpoints
		WHERE chain_key = u.k AND key_id = $7 AND position < u.below AND position > coalesce(greatest(u.mp, u.vp), 0)
		ORDER BY position DESC LIMIT 1) c ON true
	CROSS JOIN LATERAL (SELECT coalesce(greatest(u.mp, c.position, u.vp), 0) AS a) r0
	CROSS JOIN LATERAL (SELECT r0.a, least(u.t, r0.a + $10::bigint) AS b) r
	CROSS JOIN LATERAL (SELECT count(*) AS seals, min(x.position) FILTER (WHERE NOT x.ok) AS broken FROM
		(SELECT s.position, coalesce(
			(s.position = r.a OR s.prev_hash = lag(s.hash) OVER w OR r.a = 0 AND lag(s.position) OVER w IS NULL)
			AND (u.mp IS NULL OR s.position <> u.mp OR s.hash = u.mh)
			AND (c.position IS NULL OR s.position <> c.position OR s.hash = c.head_hash)
			AND (u.vp IS NULL OR s.position <> u.vp OR s.hash = u.vh)
			AND (s.position <> u.t OR s.hash = u.th), false) AS ok
		FROM audit_seals s WHERE s.chain_key = u.k AND s.position BETWEEN r.a AND r.b WINDOW w AS (ORDER BY s.position)) x) l`

// DefaultVerifyBudget is about the most seals a sealing round reads to
// check the chains it is about to sign (withhold): each chain gets its share,
// at least minVerifyShare; a chain further than its share from what the
// sealer verified waits for the next rounds, and is signed once they have
// read the rest (docs/decisions/2026-12-01-audit-sealer.md, addendum of
// 2026-12-05).
const DefaultVerifyBudget = 10_000

// minVerifyShare is the least number of seals a round reads of a chain it
// checks, however many it checks.
const minVerifyShare = 100

// span is the part of a chain that withhold checks: its seals from position
// from (the newest of its last checkpoint's and of the one the sealer
// verified; 0 for none) to position to.
type span struct {
	key      string
	h        *chainHead
	last     int64 // the last checkpoint's position (0: none)
	from, to int64
}

// withhold takes out of due, the chains whose heads a round (or Checkpoint)
// is about to sign, each chain that does not extend the last checkpoint
// signed of it, or whose seals since do not recompute from their events,
// and adds it to found, withheld with its ERROR line (the caller reports
// them, once its outcome is final).
// The last checkpoint is the newer of the one this sealer remembers signing
// (remember) and the newest in audit_checkpoints that its key signed (whose
// signature verifies: the server's role may insert rows): the one of
// another instance, or of this one before a restart (each checkpoint
// signed extended the one before it, so the newest is the one to extend). A
// chain extends it when the seal at its position still has its hash, every
// seal from there to the head read at the start of the round names the hash
// of the seal before it (prev_hash), and that head is the newest of them;
// the events sealed in the round are hashed over that head in memory. The
// seals since are then recomputed from their events (recompute).
//
// The seals before the newest position this sealer already found to
// recompute (verified), if its seal still has the hash it had then, are not
// read again: that hash commits to every seal before it back to the last
// checkpoint, as they were when it was checked; nor is a stored checkpoint
// at or below that position or the last one it signed read, nor its
// signature checked, again. So a sealer reads each seal, and each
// checkpoint, once while it remembers the chain (a restarted one reads the
// seals since each chain's last checkpoint once). With budget > 0, a chain's seals are
// read up to its share of budget past that position; a chain not read to its
// head is taken out of due without a word, and the next round reads on. It
// reads the links of all of due in one statement and their events in
// another, and returns an error only when one fails.
func (s *AuditSealer) withhold(ctx context.Context, tx pgx.Tx, due map[string]*chainHead, budget int64, found *sealFindings) error {
	if len(due) == 0 {
		return nil
	}
	pub, keyID := s.signer()
	var limit pgtype.Int8
	if budget > 0 {
		limit = pgtype.Int8{Int64: max(budget/int64(len(due)), minVerifyShare), Valid: true}
	}
	type check struct {
		key   string
		h     *chainHead
		mem   *signedHead
		ver   *signedHead
		below int64
	}
	checks := make([]*check, 0, len(due))
	s.mu.Lock()
	for key, h := range due {
		c := &check{key: key, h: h, below: math.MaxInt64}
		if m, ok := s.signed[key]; ok {
			c.mem = &m
		}
		if v, ok := s.verified[key]; ok {
			c.ver = &v
		}
		checks = append(checks, c)
	}
	s.mu.Unlock()
	var spans []span
	for len(checks) > 0 {
		n := len(checks)
		keys, to, toHash, below := make([]string, n), make([]int64, n), make([][]byte, n), make([]int64, n)
		memPos, memHash := make([]pgtype.Int8, n), make([][]byte, n)
		verPos, verHash := make([]pgtype.Int8, n), make([][]byte, n)
		for i, c := range checks {
			keys[i], to[i], toHash[i], below[i] = c.key, c.h.startPos, c.h.startHash, c.below
			if c.mem != nil {
				memPos[i], memHash[i] = pgtype.Int8{Int64: c.mem.position, Valid: true}, c.mem.hash
			}
			if c.ver != nil {
				verPos[i], verHash[i] = pgtype.Int8{Int64: c.ver.position, Valid: true}, c.ver.hash
			}
		}
		rows, err := tx.Query(ctx, extendSQL, keys, memPos, memHash, to, toHash, below, keyID, verPos, verHash, limit)
		if err != nil {
			return fmt.Errorf("check checkpoints extended: %w", err)
		}
		var again []*check
		for rows.Next() {
			var i, from, seals int64
			var cpPos, upTo, broken pgtype.Int8
			var cpHash, sig []byte
			var signedAt pgtype.Timestamptz
			if err := rows.Scan(&i, &cpPos, &cpHash, &signedAt, &sig, &from, &upTo, &seals, &broken); err != nil {
				rows.Close()
				return fmt.Errorf("check checkpoints extended: %w", err)
			}
			c := checks[i-1]
			var last int64 // the newest checkpoint's position
			if c.mem != nil {
				last = c.mem.position
			}
			if c.ver != nil {
				last = max(last, c.ver.last)
			}
			if cpPos.Valid {
				cp := checkpointOfRow(c.key, cpPos.Int64, cpHash, signedAt.Time, keyID, sig)
				if cp.Verify(pub) != nil {
					c.below = cpPos.Int64 // not the sealer's: look below it
					again = append(again, c)
					continue
				}
				last = max(last, cpPos.Int64)
			}
			// Nothing signed nor verified yet: read from the first seal,
			// however many (a chain's first seal is 1, or after its anchor).
			first := from == 0 && !broken.Valid
			if first || from <= c.h.startPos && seals == upTo.Int64-from+1 && !broken.Valid {
				spans = append(spans, span{key: c.key, h: c.h, last: last, from: from, to: upTo.Int64})
				continue // extended so far
			}
			bad := broken.Int64
			if !broken.Valid {
				bad = c.h.startPos + 1 // the head is before the checkpoint
			}
			delete(due, c.key)
			found.withheld = append(found.withheld, withheldChain{c.key, last})
			found.error("audit sealer: a chain does not extend the last checkpoint signed of it (a seal at or after the checkpoint was changed or removed): not signed; verify the chain",
				"chain", c.key, "checkpoint_position", last, "position", c.h.position, "head_position", c.h.startPos,
				"first_bad_position", bad)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("check checkpoints extended: %w", err)
		}
		checks = again
	}
	return s.recompute(ctx, tx, due, spans, found)
}

// recomputeSQL reads, for each chain ($1), the seals after position $2 up
// to $3 with their events (sealedEventsFrom), and the chain's retention
// anchor's position: a seal at or below it may have lost its event to
// retention.
var recomputeSQL = `SELECT u.i, coalesce(a.events, 0), ` + sealedEventColumns + `
	FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(k, f, t, i)
	LEFT JOIN audit_chain_anchors a ON a.chain_key = u.k
	JOIN ` + sealedEventsFrom + ` ON s.chain_key = u.k AND s.position > u.f AND s.position <= u.t
	ORDER BY u.i, s.position`

// recompute takes out of due each chain of spans where a seal after from up
// to to does not recompute from its event with the hashing verification uses
// (sealedEvent.recomputes), and adds it to found, withheld with its ERROR
// line (reported by withhold's caller): a checkpoint vouches for a log that
// verifies. A seal at or below the chain's
// retention anchor whose event is gone is taken as dropped by retention
// (verification tells which are). It records how far each chain recomputes
// (verified), and takes out of due without a word a chain that it did not
// read to its head (to is before it: the budget).
func (s *AuditSealer) recompute(ctx context.Context, tx pgx.Tx, due map[string]*chainHead, spans []span, found *sealFindings) error {
	n := len(spans)
	if n == 0 {
		return nil
	}
	keys, from, to := make([]string, n), make([]int64, n), make([]int64, n)
	for i, sp := range spans {
		keys[i], from[i], to[i] = sp.key, sp.from, sp.to
	}
	reached, reachHash, bad := make([]int64, n), make([][]byte, n), make([]int64, n)
	copy(reached, from)
	rows, err := tx.Query(ctx, recomputeSQL, keys, from, to)
	if err != nil {
		return fmt.Errorf("recompute seals since checkpoints: %w", err)
	}
	var x sealedEvent
	for rows.Next() {
		var i, anchor int64
		if err := x.scan(rows, &i, &anchor); err != nil {
			rows.Close()
			return fmt.Errorf("recompute seals since checkpoints: %w", err)
		}
		switch i--; {
		case bad[i] != 0:
		case x.recomputes() || !x.found && x.pos <= anchor:
			reached[i], reachHash[i] = x.pos, x.hash
		default:
			bad[i] = x.pos
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("recompute seals since checkpoints: %w", err)
	}
	for i, sp := range spans {
		if reached[i] > sp.from {
			s.rememberVerified(sp.key, signedHead{position: reached[i], hash: reachHash[i], last: sp.last})
		}
		switch {
		case bad[i] != 0:
			delete(due, sp.key)
			found.withheld = append(found.withheld, withheldChain{sp.key, sp.last})
			found.error("audit sealer: a seal since the last checkpoint signed of a chain does not recompute from its event (the event edited or gone, or the seal forged): not signed; verify the chain",
				"chain", sp.key, "checkpoint_position", sp.last, "position", sp.h.position, "head_position", sp.h.startPos,
				"first_bad_position", bad[i])
		case sp.to < sp.h.startPos:
			delete(due, sp.key) // its share of the budget ran out: a later round
		}
	}
	return nil
}

// rememberVerified records that the seals of chain up to v recompute.
func (s *AuditSealer) rememberVerified(chain string, v signedHead) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verified == nil {
		s.verified = map[string]signedHead{}
	}
	rememberIn(s.verified, chain, v)
}

// rememberIn sets m[chain] to v, forgetting another chain first when m
// holds maxRemembered.
func rememberIn[V any](m map[string]V, chain string, v V) {
	if _, ok := m[chain]; !ok && len(m) >= maxRemembered {
		for k := range m { // forget one
			delete(m, k)
			break
		}
	}
	m[chain] = v
}

// remember records the checkpoints w signed as the last this sealer signed
// of their chains, once their transaction committed.
func (s *AuditSealer) remember(w *sealWrites) {
	if w == nil || len(w.checkpoints.chain) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.signed == nil {
		s.signed, s.verified = map[string]signedHead{}, map[string]signedHead{}
	}
	for i, chain := range w.checkpoints.chain {
		// The seals up to a head signed recompute: those read were checked
		// (recompute), and the round hashed the others from their events.
		head := signedHead{position: w.checkpoints.position[i], hash: w.checkpoints.hash[i], last: w.checkpoints.position[i]}
		rememberIn(s.signed, chain, head)
		rememberIn(s.verified, chain, head)
		delete(s.withheldAt, chain) // repaired: a new tampering counts
	}
}

// readHeads returns the heads of the chains of events (a chain without one
// starts at position 0 with no hash).
func (s *AuditSealer) readHeads(ctx context.Context, tx pgx.Tx, events []SpineEvent) (map[string]*chainHead, error) {
	heads := map[string]*chainHead{}
	var keys []string
	for _, ev := range events {
		if heads[ev.Record.ChainKey] == nil {
			heads[ev.Record.ChainKey] = &chainHead{}
			keys = append(keys, ev.Record.ChainKey)
		}
	}
	if len(keys) == 0 {
		return heads, nil
	}
	rows, err := tx.Query(ctx, `SELECT chain_key, head_hash, event_id::text, event_at, events, checkpoint_position, checkpoint_at,
		checkpoint_key_id, NOT `+headVouchedSQL+` FROM audit_chain_heads h WHERE chain_key = ANY($1::text[])`, keys)
	if err != nil {
		return nil, fmt.Errorf("read chain heads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var h chainHead
		if err := rows.Scan(&key, &h.hash, &h.eventID, &h.eventAt, &h.position, &h.checkpointPos, &h.checkpointAt, &h.checkpointKey, &h.unvouched); err != nil {
			return nil, fmt.Errorf("read chain heads: %w", err)
		}
		h.startPos, h.startHash = h.position, h.hash
		heads[key] = &h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chain heads: %w", err)
	}
	return heads, nil
}

// sweep adds to heads the chains that no checkpoint covers
// to their head and whose last checkpoint is due, up to page of them, so
// that a chain that went quiet right after a checkpoint gets one of its head.
// It reads them by chain key, after the last one the sweep before read
// (sweepAfter), and from the first again once it read fewer than page: a
// chain withheld at every sweep (it stays due) does not keep the chains
// after it from being swept. It returns the key to sweep after next time.
// A head its seal does not vouch for (headVouchedSQL) is not read: it is
// never signed, and must not take the place of one that is. A chain whose
// last checkpoint another key signed (after a key rotation) is due too,
// quiet or not: its head is signed again with the sealer's key. (Another
// key is written as two ranges and NULL, which audit_heads_key_idx serves,
// not IS DISTINCT FROM, which no index does: migration 0021.)
func (s *AuditSealer) sweep(ctx context.Context, tx pgx.Tx, heads map[string]*chainHead, now time.Time, page int) (string, error) {
	_, keyID := s.signer()
	rows, err := tx.Query(ctx, `SELECT chain_key, head_hash, event_id::text, event_at, events, checkpoint_position, checkpoint_at,
			checkpoint_key_id
		FROM audit_chain_heads h WHERE (checkpoint_position < events
			OR checkpoint_key_id < $3 OR checkpoint_key_id > $3 OR checkpoint_key_id IS NULL)
		AND (checkpoint_at IS NULL OR checkpoint_at <= $1)
		AND chain_key > $2 AND `+headVouchedSQL+` ORDER BY chain_key LIMIT `+fmt.Sprint(page),
		now.Add(-s.every()), s.sweepAfter, keyID)
	if err != nil {
		return "", fmt.Errorf("checkpoint sweep: %w", err)
	}
	defer rows.Close()
	var n int
	var last string
	for rows.Next() {
		var key string
		h := &chainHead{}
		if err := rows.Scan(&key, &h.hash, &h.eventID, &h.eventAt, &h.position, &h.checkpointPos, &h.checkpointAt, &h.checkpointKey); err != nil {
			return "", fmt.Errorf("checkpoint sweep: %w", err)
		}
		h.startPos, h.startHash = h.position, h.hash
		if heads[key] == nil { // a chain of this round's events is newer there
			heads[key] = h
		}
		n, last = n+1, key
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("checkpoint sweep: %w", err)
	}
	if n < page {
		last = "" // the end: from the first next time
	}
	return last, nil
}

// sealWrites are the rows a round writes, as columns for unnest.
type sealWrites struct {
	sealedAt time.Time
	seals    struct {
		chain, event   []string
		position       []int64
		at             []time.Time
		prevHash, hash [][]byte
	}
	heads struct {
		key, eventID   []string
		hash           [][]byte
		at             []time.Time
		position, cpos []int64
		cat            []pgtype.Timestamptz
		ckey           []pgtype.Text
	}
	checkpoints struct {
		chain, keyID   []string
		position       []int64
		hash, pub, sig [][]byte
		signedAt       []time.Time
	}
	// marks are the checkpoints of heads whose seals did not move (swept).
	marks struct {
		key, keyID []string
		position   []int64
		at         []time.Time
	}
	cursor *SpineCursor
	// inWay are the rows of audit_checkpoints that held the key of a
	// checkpoint signed, which was not stored (read by send).
	inWay []storedCheckpoint
}

// storedCheckpoint is a row of audit_checkpoints found at the key of the
// checkpoint i of sealWrites.checkpoints; its fields are nil when the row
// was not visible (committed by a transaction this one waited on).
type storedCheckpoint struct {
	i              int
	hash, pub, sig []byte
	signedAt       pgtype.Timestamptz
}

// reportBlocked adds to found, blocked with its ERROR line, each
// checkpoint of w that was not stored because the row already at its key is
// not a checkpoint of the same head signed by the sealer's key (the caller
// reports them, once its outcome is final). A row that is one (the head
// signed before, by this sealer or another instance) stands for it: not
// reported.
func (s *AuditSealer) reportBlocked(w *sealWrites, found *sealFindings) {
	if len(w.inWay) == 0 {
		return
	}
	pub, _ := s.signer()
	for _, r := range w.inWay {
		chain, pos, hash := w.checkpoints.chain[r.i], w.checkpoints.position[r.i], w.checkpoints.hash[r.i]
		cp := checkpointOfRow(chain, pos, r.hash, r.signedAt.Time, w.checkpoints.keyID[r.i], r.sig)
		if r.signedAt.Valid && bytes.Equal(r.hash, hash) && bytes.Equal(r.pub, pub) && cp.Verify(pub) == nil {
			continue
		}
		found.blocked++
		found.error("audit sealer: the row of audit_checkpoints at the key of a checkpoint signed is not the checkpoint signed (inserted there by someone with write access to the database): the checkpoint is not stored; verify the chain",
			"chain", chain, "position", pos, "key_id", cp.KeyID, "row_visible", r.signedAt.Valid,
			"row_head_hash", hex.EncodeToString(r.hash), "head_hash", hex.EncodeToString(hash))
	}
}

// seal adds the seal of r after head h with hash.
func (w *sealWrites) seal(r audit.Record, h *chainHead, hash []byte) {
	w.seals.chain = append(w.seals.chain, r.ChainKey)
	w.seals.position = append(w.seals.position, h.position+1)
	w.seals.event = append(w.seals.event, r.ID)
	w.seals.at = append(w.seals.at, r.OccurredAt)
	w.seals.prevHash = append(w.seals.prevHash, h.hash)
	w.seals.hash = append(w.seals.hash, hash)
}

// head adds the upsert of a chain's head.
func (w *sealWrites) head(key string, h *chainHead) {
	w.heads.key = append(w.heads.key, key)
	w.heads.hash = append(w.heads.hash, h.hash)
	w.heads.eventID = append(w.heads.eventID, h.eventID)
	w.heads.at = append(w.heads.at, h.eventAt)
	w.heads.position = append(w.heads.position, h.position)
	w.heads.cpos = append(w.heads.cpos, h.checkpointPos)
	w.heads.cat = append(w.heads.cat, h.checkpointAt)
	w.heads.ckey = append(w.heads.ckey, h.checkpointKey)
}

// checkpoint signs the head h of chain key at now, adds the checkpoint and
// records it in h.
func (w *sealWrites) checkpoint(key ed25519.PrivateKey, chain string, h *chainHead, now time.Time) {
	cp := audit.SignCheckpoint(key, chain, h.position, h.hash, now)
	sig, _ := base64.StdEncoding.DecodeString(cp.Signature)
	w.checkpoints.chain = append(w.checkpoints.chain, chain)
	w.checkpoints.position = append(w.checkpoints.position, h.position)
	w.checkpoints.hash = append(w.checkpoints.hash, h.hash)
	w.checkpoints.signedAt = append(w.checkpoints.signedAt, cp.SignedAt)
	w.checkpoints.keyID = append(w.checkpoints.keyID, cp.KeyID)
	w.checkpoints.pub = append(w.checkpoints.pub, key.Public().(ed25519.PublicKey))
	w.checkpoints.sig = append(w.checkpoints.sig, sig)
	h.checkpointPos, h.checkpointAt = h.position, pgtype.Timestamptz{Time: now, Valid: true}
	h.checkpointKey = pgtype.Text{String: cp.KeyID, Valid: true}
	if !h.changed {
		w.marks.key = append(w.marks.key, chain)
		w.marks.keyID = append(w.marks.keyID, cp.KeyID)
		w.marks.position = append(w.marks.position, h.position)
		w.marks.at = append(w.marks.at, now)
	}
}

// send writes everything in one round trip.
func (w *sealWrites) send(ctx context.Context, tx pgx.Tx) error {
	b := &pgx.Batch{}
	if n := len(w.seals.chain); n > 0 {
		b.Queue(`INSERT INTO audit_seals (chain_key, position, event_id, occurred_at, prev_hash, hash, sealed_at)
			SELECT c, p, e::uuid, o, ph, h, $7 FROM unnest($1::text[], $2::bigint[], $3::text[], $4::timestamptz[],
				$5::bytea[], $6::bytea[]) AS u(c, p, e, o, ph, h)`,
			w.seals.chain, w.seals.position, w.seals.event, w.seals.at, w.seals.prevHash, w.seals.hash, w.sealedAt)
	}
	if len(w.heads.key) > 0 {
		b.Queue(`INSERT INTO audit_chain_heads (chain_key, head_hash, event_id, event_at, events, checkpoint_position, checkpoint_at,
				checkpoint_key_id)
			SELECT k, h, e::uuid, a, p, cp, ca, ck FROM unnest($1::text[], $2::bytea[], $3::text[], $4::timestamptz[],
				$5::bigint[], $6::bigint[], $7::timestamptz[], $8::text[]) AS u(k, h, e, a, p, cp, ca, ck)
			ON CONFLICT (chain_key) DO UPDATE SET head_hash = excluded.head_hash, event_id = excluded.event_id,
				event_at = excluded.event_at, events = excluded.events,
				checkpoint_position = excluded.checkpoint_position, checkpoint_at = excluded.checkpoint_at,
				checkpoint_key_id = excluded.checkpoint_key_id`,
			w.heads.key, w.heads.hash, w.heads.eventID, w.heads.at, w.heads.position, w.heads.cpos, w.heads.cat, w.heads.ckey)
	}
	if len(w.checkpoints.chain) > 0 {
		// The rows that held a checkpoint's key before: the main query does
		// not see what the WITH inserted, so it reads only those. One not
		// inserted and not read was committed by another transaction while
		// this one waited on it (nothing to compare: inWay with no row).
		b.Queue(`WITH ins AS (INSERT INTO audit_checkpoints (chain_key, position, head_hash, signed_at, key_id, public_key, signature)
				SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::timestamptz[], $5::text[], $6::bytea[], $7::bytea[])
				ON CONFLICT DO NOTHING RETURNING chain_key)
			SELECT u.i, c.head_hash, c.signed_at, c.public_key, c.signature
			FROM unnest($1::text[], $2::bigint[], $5::text[]) WITH ORDINALITY AS u(k, p, kid, i)
			LEFT JOIN audit_checkpoints c ON c.chain_key = u.k AND c.position = u.p AND c.key_id = u.kid
			WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.chain_key = u.k)`,
			w.checkpoints.chain, w.checkpoints.position, w.checkpoints.hash, w.checkpoints.signedAt,
			w.checkpoints.keyID, w.checkpoints.pub, w.checkpoints.sig).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var i int64
				var row storedCheckpoint
				if err := rows.Scan(&i, &row.hash, &row.signedAt, &row.pub, &row.sig); err != nil {
					return err
				}
				row.i = int(i - 1)
				w.inWay = append(w.inWay, row)
			}
			return rows.Err()
		})
	}
	if len(w.marks.key) > 0 {
		// A checkpoint of the position already marked is marked when
		// another key signed that one (a sweep after a key rotation).
		b.Queue(`UPDATE audit_chain_heads h SET checkpoint_position = u.p, checkpoint_at = u.a, checkpoint_key_id = u.kid
			FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::text[]) AS u(k, p, a, kid)
			WHERE h.chain_key = u.k AND (h.checkpoint_position < u.p
				OR h.checkpoint_position = u.p AND h.checkpoint_key_id IS DISTINCT FROM u.kid)`,
			w.marks.key, w.marks.position, w.marks.at, w.marks.keyID)
	}
	if w.cursor != nil {
		b.Queue(`UPDATE audit_seal_cursor SET tx_id = $1, seq = $2, moved_at = now() WHERE id = 1`, w.cursor.TxID, w.cursor.Seq)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write seals: %w", err)
	}
	return nil
}

// Checkpoint signs the head of chainKey now, whatever the time since its last
// checkpoint, and returns it; nil when the chain has no seal yet. It waits
// for a round in progress instead of skipping, and needs a Key. It returns
// an error, and signs nothing, when the head is not the chain's newest seal
// (audit_chain_heads was changed) or the chain does not extend the last
// checkpoint signed of it or a seal since does not recompute from its event
// (see withhold: also logged and counted; it reads every seal since that
// this sealer has not checked, however many), and
// ErrSealCursorMissing (wrapped) when the sealer's cursor is gone (then it
// cannot wait for a round).
func (s *AuditSealer) Checkpoint(ctx context.Context, chainKey string) (*AuditCheckpoint, error) {
	if s.Key == nil {
		return nil, errors.New("audit checkpoint: the sealer has no signing key")
	}
	var out *AuditCheckpoint
	var w *sealWrites
	// found are the refusals, reported once (Checkpoint runs its
	// transaction once), whatever its outcome: a refusal is an error.
	var found sealFindings
	err := pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error {
		// Waits for a round in progress. Without the row nothing is locked,
		// and a checkpoint signed then is ordered with no round: refused.
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM audit_seal_cursor WHERE id = 1 FOR UPDATE`).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrSealCursorMissing
		}
		if err != nil {
			return err
		}
		h := &chainHead{}
		err = tx.QueryRow(ctx, `SELECT head_hash, events, NOT `+headVouchedSQL+` FROM audit_chain_heads h WHERE chain_key = $1`, chainKey).
			Scan(&h.hash, &h.position, &h.unvouched)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if h.unvouched {
			return fmt.Errorf("the head of chain %s (position %d) is not its newest seal: audit_chain_heads was changed; verify the chain", chainKey, h.position)
		}
		h.startPos, h.startHash = h.position, h.hash
		due := map[string]*chainHead{chainKey: h}
		if err := s.withhold(ctx, tx, due, 0, &found); err != nil {
			return err
		}
		if due[chainKey] == nil {
			return fmt.Errorf("chain %s (position %d) does not extend the last checkpoint signed of it: not signed; verify the chain", chainKey, h.position)
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		w = &sealWrites{}
		w.checkpoint(s.Key, chainKey, h, now)
		if err := w.send(ctx, tx); err != nil {
			return err
		}
		if s.reportBlocked(w, &found); found.blocked > 0 {
			return fmt.Errorf("the row of audit_checkpoints at chain %s, position %d and key %s is not the checkpoint signed "+
				"(inserted there by someone with write access to the database): not stored; verify the chain",
				chainKey, h.position, w.checkpoints.keyID[0])
		}
		out, err = scanAuditCheckpoint(tx.QueryRow(ctx, `SELECT `+auditCheckpointColumns+` FROM audit_checkpoints
			WHERE chain_key = $1 AND position = $2 AND key_id = $3`, chainKey, h.position, w.checkpoints.keyID[0]))
		return err
	})
	s.report(ctx, &found)
	if err != nil {
		return nil, fmt.Errorf("audit checkpoint: %w", err)
	}
	s.remember(w)
	return out, nil
}

// hexHash returns the lower-case hex of a hash, or nil for none.
func hexHash(b []byte) *string {
	if b == nil {
		return nil
	}
	s := hex.EncodeToString(b)
	return &s
}
