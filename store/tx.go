package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipelinedTx is the transaction of a unit of work, sent in as few round trips
// as its statements allow (docs/decisions/2026-12-01-one-round-trip.md):
//
//   - BEGIN is not a round trip of its own: it goes in the pipeline of the
//     first statement, with the idempotency claim made ahead, if any
//     (ClaimIdempotencyKeyAhead);
//   - deferred statements (checks and guarded writes, queued by defer) wait
//     for the next statement whose answer is needed now, or for the commit;
//   - COMMIT goes in the pipeline of the last statements.
//
// A mutation whose statements need no answer before the commit (a create,
// and the updates and deletes whose changes Postgres computes) is one round
// trip: BEGIN, claim, checks, writes, audit events, the idempotency record
// and COMMIT. One that must read a row first (a webhook endpoint's update) is
// two. A unit of work that sends nothing begins nothing.
//
// The transaction is managed on a connection of its own (acquired by the
// first round trip, released when it ends) with BEGIN and COMMIT sent as
// statements, so that COMMIT can share a pipeline.
type pipelinedTx struct {
	pool *pgxpool.Pool
	// conn is the connection once the first round trip acquired it.
	conn *pgxpool.Conn
	// begun is set once BEGIN ran on conn; failed once a statement failed in
	// the transaction (only ROLLBACK can end it then).
	begun, failed bool
	done          bool
	// claim, until the first round trip has sent it, is the claim that goes
	// ahead of the first statement.
	claim *PendingClaim
	// err, once set, fails every later statement: the claim sent ahead did not
	// claim its key, so nothing after it may apply.
	err error
	// pending are the deferred statements, sent before the next statement or
	// with COMMIT.
	pending []deferred
	// savepoints counts the savepoints made through unitTx, for their names.
	savepoints int
}

// deferred is a statement whose answer nobody waits for: a check or a guarded
// write. read reads its answer from the pipeline (nil: Exec, any command tag).
type deferred struct {
	sql  string
	args []any
	read func(pgx.BatchResults) error
}

// queueDeferred queues a statement to go with the next round trip.
func (t *pipelinedTx) queueDeferred(d deferred) { t.pending = append(t.pending, d) }

// idle reports whether the next statement can go to Postgres as it is: the
// transaction has begun and nothing waits to go before it.
func (t *pipelinedTx) idle() bool { return t.begun && t.claim == nil && len(t.pending) == 0 }

// send sends, in one pipeline, what must precede the next statement (BEGIN,
// the claim made ahead, the deferred statements), then the queries of b (nil
// for none) or, when commit is set, COMMIT, and reads the answers up to b's.
// It returns the results positioned at b's first query (closed already when b
// is nil or on an error). When the claim did not claim its key, b's queries
// ran but their results are dropped (the transaction must not commit them)
// and send fails with errClaimSettled. A deferred statement that failed (a
// check's refusal, a constraint) fails send with its error; the transaction
// is then aborted.
func (t *pipelinedTx) send(ctx context.Context, b *pgx.Batch, commit bool) (pgx.BatchResults, error) {
	batch := &pgx.Batch{}
	if !t.begun {
		batch.Queue("BEGIN")
	}
	claim := t.claim
	t.claim = nil
	if claim != nil {
		claim.queue(batch)
	}
	pending := t.pending
	t.pending = nil
	for _, d := range pending {
		batch.Queue(d.sql, d.args...)
	}
	if b != nil {
		batch.QueuedQueries = append(batch.QueuedQueries, b.QueuedQueries...)
	}
	if commit {
		batch.Queue("COMMIT")
	}
	if t.conn == nil {
		conn, err := t.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		t.conn = conn
	}
	br := t.conn.SendBatch(ctx, batch)
	fail := func(err error) (pgx.BatchResults, error) {
		_ = br.Close()
		if t.begun {
			t.failed = true
		}
		return nil, err
	}
	if !t.begun {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
		t.begun = true
	}
	var settled error
	if claim != nil {
		if err := claim.read(br); err != nil {
			if !errors.Is(err, errClaimSettled) {
				return fail(err)
			}
			// The deferred writes are guarded (taskflow_ok) and apply nothing;
			// read on, so that a commit in this pipeline is read too.
			settled, t.err = err, err
		}
	}
	for _, d := range pending {
		var err error
		if d.read != nil {
			err = d.read(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			return fail(err)
		}
	}
	if commit {
		tag, err := br.Exec()
		if err != nil {
			return fail(err)
		}
		t.begun = false // ended by its COMMIT (or by Postgres, rolled back)
		if err := br.Close(); err != nil {
			return nil, err
		}
		if tag.String() != "COMMIT" {
			return nil, fmt.Errorf("commit: the transaction rolled back (%s)", tag)
		}
		return nil, settled
	}
	if settled != nil || b == nil {
		if err := br.Close(); err != nil && settled == nil {
			return nil, t.failedIf(err)
		}
		return nil, settled
	}
	return br, nil
}

// flush sends what must precede the next statement, unless nothing must.
func (t *pipelinedTx) flush(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	if t.idle() {
		return nil
	}
	_, err := t.send(ctx, nil, false)
	return err
}

// usable returns the error that fails a statement now, if any.
func (t *pipelinedTx) usable() error {
	switch {
	case t.done:
		return pgx.ErrTxClosed
	case t.err != nil:
		return t.err
	}
	return nil
}

// Exec runs sql in the transaction.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.usable(); err != nil {
		return pgconn.CommandTag{}, err
	}
	if !t.idle() && len(args) > 0 {
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		br, err := t.send(ctx, b, false)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		tag, err := br.Exec()
		if cErr := br.Close(); err == nil {
			err = cErr
		}
		return tag, t.failedIf(err)
	}
	// Without arguments pgx uses the simple protocol, which allows several
	// statements in sql; a batch does not. Such a statement waits for what
	// must go before it.
	if err := t.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := t.conn.Exec(ctx, sql, args...)
	return tag, t.failedIf(err)
}

// Query runs sql in the transaction. Its rows outlive the call, so what must
// go before it is sent first, in a round trip of its own.
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	rows, err := t.conn.Query(ctx, sql, args...)
	return rows, t.failedIf(err)
}

// QueryRow runs sql in the transaction.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.usable(); err != nil {
		return errRow{err}
	}
	if t.idle() {
		return failingRow{t, t.conn.QueryRow(ctx, sql, args...)}
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br, err := t.send(ctx, b, false)
	if err != nil {
		return errRow{err}
	}
	return openingRow{t, br}
}

// SendBatch sends b in the transaction.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.usable(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if t.idle() {
		return t.conn.SendBatch(ctx, b)
	}
	br, err := t.send(ctx, b, false)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

// failedIf marks the transaction failed when err is Postgres's answer to a
// statement, which aborts a transaction, and returns err.
func (t *pipelinedTx) failedIf(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		t.failed = true
	}
	return err
}

// Commit sends the deferred statements and COMMIT in one round trip (nothing
// when the unit of work sent and deferred nothing) and returns the connection
// to the pool. It returns pgx.ErrTxClosed when the transaction had ended. A
// transaction its claim stopped (the key was not claimed, or the claim
// failed) commits nothing of its writes, and Commit returns what stopped it;
// one with a failed statement rolls back, and Commit returns the failure.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	// A rollback is not bounded by ctx's deadline: past it, it must still
	// end the transaction, and keep the connection.
	detached := context.WithoutCancel(ctx)
	if t.err != nil || t.failed {
		rbErr := t.Rollback(detached)
		if t.err != nil {
			return t.err
		}
		if rbErr != nil {
			return rbErr
		}
		return errors.New("commit: a statement of the transaction failed")
	}
	if !t.begun && t.claim == nil && len(t.pending) == 0 {
		t.done = true
		t.release()
		return nil
	}
	_, err := t.send(ctx, nil, true)
	if t.begun || t.failed {
		// The pipeline stopped before its COMMIT: roll back what began.
		_ = t.Rollback(detached)
		return err
	}
	t.done = true
	t.release()
	return err
}

// Rollback rolls the transaction back (if it began) and returns its connection
// to the pool. It returns pgx.ErrTxClosed when the transaction had ended.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	t.pending = nil
	var err error
	if t.begun {
		_, err = t.conn.Exec(ctx, "ROLLBACK")
	}
	t.release()
	return err
}

// release returns the connection to the pool; pgxpool closes one that is
// still in a transaction instead of reusing it.
func (t *pipelinedTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
	t.begun = false
}

// openingRow is the row of a statement sent with what had to go before it.
type openingRow struct {
	t  *pipelinedTx
	br pgx.BatchResults
}

// Scan reads the row, then the end of the batch.
func (r openingRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cErr := r.br.Close(); cErr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		err = cErr
	}
	return r.t.failedIf(err)
}

// failingRow is a row of the transaction whose error marks it failed.
type failingRow struct {
	t   *pipelinedTx
	row pgx.Row
}

// Scan reads the row.
func (r failingRow) Scan(dest ...any) error { return r.t.failedIf(r.row.Scan(dest...)) }

// errRow is a row that fails with err.
type errRow struct{ err error }

// Scan returns the row's error.
func (r errRow) Scan(...any) error { return r.err }
