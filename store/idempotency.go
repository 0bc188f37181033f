package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

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
// argument fingerprint, in the unit of work carried by ctx. It returns (nil, nil)
// when the key is now claimed by this transaction: the caller runs the mutation and
// stores its result with SaveIdempotencyResult before the unit of work commits
// (a rollback frees the key again). It returns the committed record when the key
// was already used and has not expired; the caller compares field and fingerprint
// and replays or refuses. An expired record is deleted and the key claimed anew.
//
// A concurrent claim of the same key by a transaction still in flight is waited
// for, at most wait; past it the error is IDEMPOTENCY_IN_PROGRESS with
// extensions.retryAfter (whole seconds). A wait of 0 or less means 1ms.
func (db *DB) ClaimIdempotencyKey(ctx context.Context, userID, key, field string, fingerprint []byte,
	ttl, wait time.Duration) (*IdempotencyRecord, error) {
	tx := TxFrom(ctx)
	if tx == nil {
		return nil, ErrNoUnitOfWork
	}
	waitMS := max(wait.Milliseconds(), 1)
	ttlMS := max(ttl.Milliseconds(), 1)
	for range 4 {
		// One round trip: bound the wait on a concurrent claim, try to claim, and
		// put the lock timeout back so the mutation's own statements are not bound.
		b := &pgx.Batch{}
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(waitMS, 10))
		b.Queue(`INSERT INTO idempotency_keys (user_id, key, field, fingerprint, expires_at)
			VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond')
			ON CONFLICT (user_id, key) DO NOTHING`, userID, key, field, fingerprint, ttlMS)
		b.Queue(`SET LOCAL lock_timeout TO DEFAULT`)
		br := tx.SendBatch(ctx, b)
		_, err := br.Exec()
		var tag pgconn.CommandTag
		if err == nil {
			tag, err = br.Exec()
		}
		if err == nil {
			_, err = br.Exec()
		}
		if cErr := br.Close(); err == nil {
			err = cErr
		}
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
				return nil, inProgress(wait)
			}
			return nil, fmt.Errorf("claim idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, nil
		}
		var rec IdempotencyRecord
		var expired bool
		err = tx.QueryRow(ctx, `SELECT field, fingerprint, result, expires_at <= now()
			FROM idempotency_keys WHERE user_id = $1 AND key = $2`, userID, key).
			Scan(&rec.Field, &rec.Fingerprint, &rec.Result, &expired)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // purged between the two statements: claim again
		}
		if err != nil {
			return nil, fmt.Errorf("read idempotency key: %w", err)
		}
		if !expired {
			return &rec, nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM idempotency_keys
			WHERE user_id = $1 AND key = $2 AND expires_at <= now()`, userID, key); err != nil {
			return nil, fmt.Errorf("delete expired idempotency key: %w", err)
		}
	}
	return nil, inProgress(wait)
}

// inProgress is the IDEMPOTENCY_IN_PROGRESS error, with the whole seconds after
// which a retry makes sense in extensions.retryAfter.
func inProgress(wait time.Duration) *Error {
	e := Errorf(CodeIdempotencyInProgress,
		"a request with this idempotency key is still in progress; retry later")
	e.Extensions = map[string]any{"retryAfter": max(int64(math.Ceil(wait.Seconds())), 1)}
	return e
}

// SaveIdempotencyResult stores the JSON root result of the mutation that claimed
// (userID, key) in the unit of work carried by ctx.
//
// The write is sent when the unit of work ends, in the round trip that takes
// its first audit chain's lock (nothing in between reads it); a failure then
// rolls the unit of work back.
func (db *DB) SaveIdempotencyResult(ctx context.Context, userID, key string, result []byte) error {
	u := unitOfWorkFrom(ctx)
	if u == nil {
		return ErrNoUnitOfWork
	}
	u.deferred = append(u.deferred, deferredExec{
		sql:  `UPDATE idempotency_keys SET result = $3 WHERE user_id = $1 AND key = $2`,
		args: []any{userID, key, result},
		check: func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("save idempotency result: key not claimed")
			}
			return nil
		},
	})
	return nil
}

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
