package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipelinedTx is the transaction of a unit of work. BEGIN is not a round trip of
// its own: the transaction begins (pgx's Batch.BeginTx) in the same pipeline as
// its first statement, which saves every mutation a round trip. A unit of work
// that sends nothing begins nothing. An idempotency claim made ahead
// (ClaimIdempotencyKeyAhead) goes in that round trip too, between BEGIN and the
// first statement.
type pipelinedTx struct {
	pool *pgxpool.Pool
	// tx is the transaction once the first round trip began it.
	tx   pgx.Tx
	done bool
	// claim, until the first round trip has sent it, is the claim that goes
	// ahead of the first statement.
	claim *PendingClaim
	// err, once set, fails every later statement: the claim sent ahead did not
	// claim its key, so nothing after the first statement may run.
	err error
}

// open sends the transaction's first round trip, BEGIN, the claim made ahead
// (if any) and the queries of b (nil for none), and returns the results of b's
// queries once BEGIN's and the claim's answers are read. On an error the
// results are closed already; when BEGIN itself failed (or nothing was sent)
// the transaction is not begun, and the next statement tries again. When the
// claim did not claim its key (or failed), b's queries ran (the rollback that
// must follow undoes them) but their results are dropped, and open and every
// later statement fail with errClaimSettled (or the claim's error).
func (t *pipelinedTx) open(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	if t.claim != nil {
		t.claim.queue(first)
	}
	if b != nil {
		first.QueuedQueries = append(first.QueuedQueries, b.QueuedQueries...)
	}
	br := t.pool.SendBatch(ctx, first)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		// A transaction whose BEGIN failed is closed; rolling it back returns
		// its connection to the pool.
		if rbErr := t.tx.Rollback(context.WithoutCancel(ctx)); errors.Is(rbErr, pgx.ErrTxClosed) {
			t.tx = nil
		}
		return nil, err
	}
	if c := t.claim; c != nil {
		t.claim = nil
		if err := c.read(br); err != nil {
			_ = br.Close()
			t.err = err
			return nil, err
		}
	}
	return br, nil
}

// begin sends BEGIN in a round trip of its own, unless the transaction has
// begun.
func (t *pipelinedTx) begin(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	if t.tx != nil {
		return nil
	}
	br, err := t.open(ctx, nil)
	if err != nil {
		return err
	}
	return br.Close()
}

// Exec runs sql in the transaction.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.done {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if t.err != nil {
		return pgconn.CommandTag{}, t.err
	}
	if t.tx == nil && len(args) > 0 {
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		br, err := t.open(ctx, b)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		tag, err := br.Exec()
		if cErr := br.Close(); err == nil {
			err = cErr
		}
		return tag, err
	}
	// Without arguments pgx uses the simple protocol, which allows several
	// statements in sql; a batch does not. Such a first statement waits for
	// BEGIN's round trip.
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

// Query runs sql in the transaction. A first statement that is a Query waits
// for BEGIN's round trip (its rows outlive the call).
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.done {
		return nil, pgx.ErrTxClosed
	}
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow runs sql in the transaction.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.done {
		return errRow{pgx.ErrTxClosed}
	}
	if t.err != nil {
		return errRow{t.err}
	}
	if t.tx != nil {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br, err := t.open(ctx, b)
	if err != nil {
		return errRow{err}
	}
	return openingRow{br}
}

// SendBatch sends b in the transaction.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.done {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	if t.err != nil {
		return pgx.FailedBatchResults(b, t.err)
	}
	if t.tx != nil {
		return t.tx.SendBatch(ctx, b)
	}
	br, err := t.open(ctx, b)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

// Commit commits the transaction (nothing to do when no statement was sent)
// and returns its connection to the pool. It returns pgx.ErrTxClosed when the
// transaction had ended, and pgx.ErrTxCommitRollback when Postgres rolled back
// instead because a statement had failed. A transaction its claim stopped
// (the key was not claimed, or the claim failed) rolls back instead, and
// Commit returns what stopped it.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.err != nil {
		if err := t.end(ctx, false); err != nil {
			return err
		}
		return t.err
	}
	return t.end(ctx, true)
}

// Rollback rolls the transaction back and returns its connection to the pool.
// It returns pgx.ErrTxClosed when the transaction had ended.
func (t *pipelinedTx) Rollback(ctx context.Context) error { return t.end(ctx, false) }

// end commits (commit) or rolls back the transaction, if it began.
func (t *pipelinedTx) end(ctx context.Context, commit bool) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	switch {
	case t.tx == nil:
		return nil
	case commit:
		return t.tx.Commit(ctx)
	}
	return t.tx.Rollback(ctx)
}

// openingRow is the row of a transaction's first statement, read from the
// batch that began the transaction.
type openingRow struct{ br pgx.BatchResults }

// Scan reads the row, then the end of the batch.
func (r openingRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cErr := r.br.Close(); cErr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		err = cErr
	}
	return err
}

// errRow is a row that fails with err.
type errRow struct{ err error }

// Scan returns the row's error.
func (r errRow) Scan(...any) error { return r.err }
