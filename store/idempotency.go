package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"taskflow/errs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// IdempotencyRecord is a committed idempotency key: the mutation field it was used
// for, the fingerprint of that call's arguments and the JSON of its root result.
type IdempotencyRecord struct {
	Field       string
	Fingerprint []byte
	Result      []byte
}

// ErrNoUnitOfWork is returned by the idempotency methods when ctx carries no unit
// of work: a key must be claimed in the transaction of the mutation it guards.
var ErrNoUnitOfWork = errors.New("idempotency: no unit of work in context")

// ClaimIdempotencyKey claims (userID, key) for a call of field with the given
// argument fingerprint, in the unit of work carried by ctx, in a round trip of
// its own (ClaimIdempotencyKeyAhead is the same claim sent with the mutation's
// first statement; this one is for waiting on a busy key). It returns (nil, nil)
// when the key is now claimed by this transaction: the caller runs the mutation and
// stores its result with SaveIdempotencyResult before the unit of work commits,
// which writes the key's record then (a rollback writes nothing and frees the
// key). It returns the committed record when the key was already used and has
// not expired; the caller compares field and fingerprint and replays or refuses.
// An expired record is replaced when the unit of work commits.
//
// The claim is a transaction-scoped advisory lock on the key: the request that
// holds it is the only one running with that key until it ends, on any
// instance. The record is read after the lock is taken, in a statement of its
// own, so under READ COMMITTED it sees what a previous holder committed; a
// committed record is replayed without the lock. A claim by a transaction still
// in flight is waited for, at most wait; past it
// the error is IDEMPOTENCY_IN_PROGRESS with extensions.retryAfter (whole
// seconds). A wait of 0 or less means 1ms. The wait is at most half of what
// is left of ctx's deadline (waitWithin).
func (db *DB) ClaimIdempotencyKey(ctx context.Context, userID, key, field string, fingerprint []byte,
	ttl, wait time.Duration) (*IdempotencyRecord, error) {
	u := unitOfWorkFrom(ctx)
	if u == nil {
		return nil, ErrNoUnitOfWork
	}
	wait = waitWithin(ctx, wait)
	lock := lockName(userID, key)
	var live *IdempotencyRecord
	var locked bool
	read := func(b *pgx.Batch) {
		b.Queue(recordSQL, userID, key).QueryRow(func(row pgx.Row) (err error) {
			live, err = scanLiveRecord(row)
			return err
		})
	}
	// The usual case, one round trip: nobody holds the key.
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`, lock).
		QueryRow(func(row pgx.Row) error { return row.Scan(&locked) })
	read(b)
	if err := u.tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("claim idempotency key: %w", err)
	}
	if live != nil {
		// A committed record is final: replay it, whoever holds the lock (a
		// storm of retries of one key does not queue up on it).
		return live, nil
	}
	if !locked {
		// A request with this key is running: wait for its end, bounded, then
		// read what it left.
		b := &pgx.Batch{}
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, lock)
		b.Queue(`SET LOCAL lock_timeout TO DEFAULT`)
		read(b)
		if err := u.tx.SendBatch(ctx, b).Close(); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
				return nil, inProgress(wait)
			}
			return nil, fmt.Errorf("claim idempotency key: %w", err)
		}
	}
	if live != nil {
		return live, nil
	}
	u.claim = &idempotencyClaim{userID: userID, key: key, field: field, fingerprint: fingerprint,
		ttlMS: max(ttl.Milliseconds(), 1)}
	return nil, nil
}

// ErrIdempotencyKeyBusy is the outcome of a claim made ahead
// (ClaimIdempotencyKeyAhead) of a key that another transaction holds and has
// no record yet, and of a unit of work whose record insert found its key's
// live record already stored (a holder that committed between the claim's
// snapshot and its lock; see recordTaken): the unit of work is rolled back
// and nothing of it stays, and the caller claims the key again with
// ClaimIdempotencyKey, which waits for any holder and replays the record.
var ErrIdempotencyKeyBusy = errors.New("idempotency: the key is held by a running transaction")

// errClaimSettled fails the statements of a unit of work whose claim made ahead
// did not claim its key (the key has a record, or is busy): nothing after the
// first statement runs, and the unit of work rolls back.
var errClaimSettled = errors.New("idempotency: the key was not claimed; the unit of work rolls back")

// PendingClaim is an idempotency claim made ahead of a unit of work's first
// statement (ClaimIdempotencyKeyAhead). Result tells its outcome.
type PendingClaim struct {
	u    *unitOfWork
	c    idempotencyClaim
	wait time.Duration
	// sent is set once the claim went out; then rec, busy and err are its outcome.
	sent bool
	rec  *IdempotencyRecord
	busy bool
	err  error
}

// ClaimIdempotencyKeyAhead claims (userID, key) for a call of field with the
// given argument fingerprint, in the unit of work carried by ctx, without a
// round trip of its own: the claim goes with the unit of work's first
// statement, in the round trip that begins the transaction (see pipelinedTx).
// Call it before the unit of work sends anything, run the mutation, then ask
// the returned claim's Result. It returns ErrNoUnitOfWork when ctx carries no
// unit of work, and an error when the unit of work has sent a statement already.
//
// When the key turns out to have a record or to be held by a running
// transaction, the first statement has run in Postgres but its result is
// dropped: it and every later statement of the unit of work fail, and the
// unit of work must roll back (Result says why). So a repeat runs no more of
// the mutation than its first statement, and that in a transaction that rolls
// back. While the key is held by another transaction, the first statement's
// lock waits are bounded by wait, as the wait for the key is.
func (db *DB) ClaimIdempotencyKeyAhead(ctx context.Context, userID, key, field string, fingerprint []byte,
	ttl, wait time.Duration) (*PendingClaim, error) {
	u := unitOfWorkFrom(ctx)
	if u == nil {
		return nil, ErrNoUnitOfWork
	}
	if u.tx.begun || u.tx.done || u.tx.claim != nil || u.tx.err != nil || u.claim != nil {
		return nil, errors.New("idempotency: a claim made ahead must come before the unit of work's first statement")
	}
	p := &PendingClaim{u: u, wait: wait, c: idempotencyClaim{userID: userID, key: key, field: field,
		fingerprint: fingerprint, ttlMS: max(ttl.Milliseconds(), 1)}}
	u.tx.claim = p
	return p, nil
}

// queue adds the claim to the first round trip, in one statement: the key's
// lock (if it is not taken, its lock_timeout becomes the wait, so the
// statements after it do not wait on the holder's rows for longer) and its
// record. When the key is not claimed (busy, or it has a live record) it sets
// taskflow.refused, so the deferred writes of the unit of work, all guarded by
// taskflow_ok(), apply nothing (migration 0009).
//
// The record is read with the statement's snapshot, taken before the lock: a
// holder that commits its record and releases the lock between the two is not
// seen, and the claim claims a key that has a record. That record is found
// when this unit of work writes its own (saveRecord), which then refuses with
// recordTaken: the transaction aborts and nothing of it stays, and the
// caller claims the key again (ErrIdempotencyKeyBusy), which replays it. Two
// statements (the lock, then the read with a snapshot that follows it) would
// close that window at one statement more in every keyed mutation
// (docs/decisions/2026-12-05-one-statement-claim.md).
func (p *PendingClaim) queue(b *pgx.Batch) {
	b.Queue(claimSQL,
		lockName(p.c.userID, p.c.key), p.c.userID, p.c.key, strconv.FormatInt(max(p.wait.Milliseconds(), 1), 10))
}

// read reads the claim's answer from the first round trip and settles it; it
// returns errClaimSettled when the key was not claimed.
func (p *PendingClaim) read(br pgx.BatchResults) error {
	p.sent = true
	var locked bool
	var field *string
	rec := IdempotencyRecord{}
	var expired *bool
	if err := br.QueryRow().Scan(&locked, &field, &rec.Fingerprint, &rec.Result, &expired, new(*string), new(*string)); err != nil {
		p.err = fmt.Errorf("claim idempotency key: %w", err)
		return p.err
	}
	switch {
	case field != nil && expired != nil && !*expired:
		rec.Field = *field
		p.rec = &rec
		return errClaimSettled
	case !locked:
		p.busy = true
		return errClaimSettled
	}
	p.u.claim = &p.c
	return nil
}

// Result returns the claim's outcome, sending it (with BEGIN and the deferred
// statements, in a round trip of its own) if the unit of work has sent
// nothing yet: (nil, nil) when the unit
// of work holds the key, and the mutation's result is stored with
// SaveIdempotencyResult; the committed record of the key when it was used and
// has not expired (the caller compares field and fingerprint, then replays or
// refuses); ErrIdempotencyKeyBusy when a running transaction holds the key.
// Unless it returns (nil, nil), the unit of work must roll back.
func (p *PendingClaim) Result(ctx context.Context) (*IdempotencyRecord, error) {
	if !p.sent {
		if err := p.u.tx.flush(ctx); err != nil && !p.sent {
			return nil, err
		}
	}
	switch {
	case p.err != nil:
		return nil, p.err
	case p.rec != nil:
		return p.rec, nil
	case p.busy:
		return nil, ErrIdempotencyKeyBusy
	}
	return nil, nil
}

// Refused reports whether the claim was sent and did not claim its key: the
// key has a record, or a running transaction holds it. The unit of work then
// applied nothing and failed; Result (without a round trip) says which.
func (p *PendingClaim) Refused() bool { return p.sent && p.err == nil && (p.rec != nil || p.busy) }

// waitWithin returns wait, at most half of what is left of ctx's deadline
// (a request's REQUEST_TIMEOUT): a claim that waits on the running holder of
// its key then answers IDEMPOTENCY_IN_PROGRESS, "retry later", before the
// deadline would cut it short as TIMEOUT, "ask for less", which is not what
// happened.
func waitWithin(ctx context.Context, wait time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/2)
	}
	return wait
}

// lockName names the advisory lock of a user's idempotency key.
func lockName(userID, key string) string { return "idempotency:" + userID + ":" + key }

// claimSQL claims a user's key ($2, $3): its lock ($1), and its record read
// as recordSQL reads it; $4 is the wait (PendingClaim.queue).
const claimSQL = `SELECT l.locked, r.field, r.fingerprint, r.result, r.expires_at <= now(),
			CASE WHEN NOT l.locked THEN set_config('lock_timeout', $4, true) END,
			CASE WHEN r.expires_at > now() THEN set_config('taskflow.refused', 'replay', true)
				WHEN NOT l.locked THEN set_config('taskflow.refused', 'busy', true) END
		FROM (SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS locked) l
		LEFT JOIN LATERAL (SELECT field, fingerprint, result, expires_at FROM idempotency_keys
			WHERE user_id = $2 AND key = $3 LIMIT 1) r ON true`

// recordSQL reads the record of a user's key ($1, $2) and whether it expired.
//
// LIMIT 1, though the key is the primary key: Postgres estimates the rows
// of (user_id, key) as the product of each column's selectivity, tens of
// rows for a user with many keys, and then reads them with a bitmap heap
// scan, whose bitmap costs more than the lookup. With the limit it takes
// the index scan: measured with pgbench on a 2-core VM, a keyed create's
// claim cost Postgres 153 µs of CPU more than raw SQL's create, 13 µs with
// it (docs/decisions/2026-12-05-one-statement-claim.md).
const recordSQL = `SELECT field, fingerprint, result, expires_at <= now()
	FROM idempotency_keys WHERE user_id = $1 AND key = $2 LIMIT 1`

// scanLiveRecord scans the row of recordSQL (and the columns of extra after
// it): the record, or nil when the key has none or it expired.
func scanLiveRecord(row pgx.Row, extra ...any) (*IdempotencyRecord, error) {
	var rec IdempotencyRecord
	var expired bool
	err := row.Scan(append([]any{&rec.Field, &rec.Fingerprint, &rec.Result, &expired}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && expired {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// idempotencyClaim is the key a unit of work holds, written with its result.
type idempotencyClaim struct {
	userID, key, field string
	fingerprint        []byte
	ttlMS              int64
}

// inProgress is the IDEMPOTENCY_IN_PROGRESS error, with the whole seconds after
// which a retry makes sense in extensions.retryAfter.
func inProgress(wait time.Duration) *errs.Error {
	e := errs.Errorf(errs.CodeIdempotencyInProgress,
		"a request with this idempotency key is still in progress; retry later")
	e.Extensions = map[string]any{"retryAfter": max(int64(math.Ceil(wait.Seconds())), 1)}
	return e
}

// SaveIdempotencyResult stores the JSON root result of the mutation whose
// unit of work (carried by ctx) claimed (userID, key) with ClaimIdempotencyKey
// or ClaimIdempotencyKeyAhead: the key's record (field, fingerprint, result,
// expiry) is written when the unit of work ends, in the round trip that
// commits it (nothing in between reads it), replacing an expired record, and
// only if the claim claimed (a claim ahead not sent yet goes in that round
// trip too). It fails when the unit of work did not claim that key; a record that appeared meanwhile
// (only a claim by an older version of TaskFlow, which did not take the lock,
// can do that) fails the unit of work when it ends, which rolls it back.
func (db *DB) SaveIdempotencyResult(ctx context.Context, userID, key string, result []byte) error {
	return db.saveRecord(ctx, userID, key, "$5::jsonb", result)
}

// SaveIdempotencyValue is SaveIdempotencyResult of v's JSON. When v is a row
// an update of the unit of work returned (updateRecorded), known only once its
// statements are sent, the JSON is made by Postgres from the row as the unit
// of work leaves it, in the same round trip: equal, once decoded, to v's
// (TestUpdatesInSQLAreGos). Any other v is marshalled in Go; when the unit of
// work has such rows, its statements are sent first (a round trip more), so
// that a v that holds one of them (a copy, a payload around it) is
// marshalled as it is stored, never half filled in.
func (db *DB) SaveIdempotencyValue(ctx context.Context, userID, key string, v any) error {
	if u := unitOfWorkFrom(ctx); u != nil && len(u.rows) > 0 {
		if r, ok := u.rows[v]; ok {
			return db.saveRecord(ctx, userID, key, r.sql, r.arg)
		}
		if err := u.tx.flush(ctx); err != nil {
			return err
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("save idempotency result: %w", err)
	}
	return db.SaveIdempotencyResult(ctx, userID, key, b)
}

// saveRecord is SaveIdempotencyResult of the result that the SQL result (a
// jsonb) gives, where $5 is arg.
func (db *DB) saveRecord(ctx context.Context, userID, key, result string, arg any) error {
	u := unitOfWorkFrom(ctx)
	if u == nil {
		return ErrNoUnitOfWork
	}
	c := u.claim
	if c == nil && u.tx.claim != nil {
		// A claim made ahead and not sent yet: it goes in the same round trip
		// as the record, before it, and the record's insert is guarded by it
		// (taskflow_ok): the record is written only if the claim claims.
		c = &u.tx.claim.c
	}
	if c == nil || c.userID != userID || c.key != key {
		return fmt.Errorf("save idempotency result: key not claimed")
	}
	tx := u.tx
	u.tx.queueDeferred(deferred{
		sql: `INSERT INTO idempotency_keys (user_id, key, field, fingerprint, result, expires_at)
			SELECT $1::uuid, $2::text, $3::text, $4::bytea, ` + result + `, now() + $6::bigint * interval '1 millisecond'
			WHERE taskflow_ok()
			ON CONFLICT (user_id, key) DO UPDATE SET field = CASE WHEN idempotency_keys.expires_at <= now() THEN excluded.field
					WHEN taskflow_check('` + recordTaken + `') THEN excluded.field END,
				fingerprint = excluded.fingerprint, result = excluded.result,
				created_at = now(), expires_at = excluded.expires_at`,
		args: []any{c.userID, c.key, c.field, c.fingerprint, arg, c.ttlMS},
		read: func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() != 1 && tx.err == nil {
				err = fmt.Errorf("save idempotency result: the key %q was not written", key)
			}
			return recordTakenRefusal.refusal(err)
		},
	})
	return nil
}

// recordTaken is the refusal of a record's insert that finds a live record of
// its key: one committed after the claim read the key's record (PendingClaim.queue),
// or by a version of TaskFlow that did not take the key's lock.
const recordTaken = "idempotency_record_taken"

// recordTakenRefusal maps that refusal to ErrIdempotencyKeyBusy: the unit of
// work aborted, nothing of it stays, and the caller claims the key again,
// which finds the record and replays it.
var recordTakenRefusal = refusals{recordTaken: ErrIdempotencyKeyBusy}

// PurgeExpiredIdempotencyKeys deletes at most limit expired idempotency keys and
// returns how many it deleted. Rows locked by another purger (or by a request
// reclaiming an expired key) are skipped, so several instances can purge at once.
func (db *DB) PurgeExpiredIdempotencyKeys(ctx context.Context, limit int) (int64, error) {
	tag, err := db.Pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE ctid IN (
			SELECT ctid FROM idempotency_keys WHERE expires_at <= now()
			LIMIT $1 FOR UPDATE SKIP LOCKED)
		AND expires_at <= now()`, limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
