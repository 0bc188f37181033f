package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// River (github.com/riverqueue/river) is the job engine of webhook
// deliveries: its jobs live in this database (river_job), are inserted in the
// transaction that decides them, and are worked by every instance (package
// webhook). The store inserts them; it never works them.

// WebhookQueue is the River queue of webhook deliveries.
const WebhookQueue = "webhooks"

// WebhookMaxAttempts is the number of attempts of a delivery before it is
// marked FAILED (the first and ten retries; the schedule is package
// webhook's).
const WebhookMaxAttempts = 11

// webhookJobMaxAttempts is the River attempts of a delivery's job: one run
// more than the delivery's attempts. A run after the last attempt makes no
// attempt: it only marks FAILED a delivery that the last attempt left
// PENDING, because its instance died during it (River rescues the job) or
// its outcome could not be recorded (the run returned an error); with no
// run left, River would discard the job and the delivery would stay PENDING
// for ever (GiveUpWebhookDelivery). Jobs inserted by earlier versions have
// WebhookMaxAttempts runs: FailStrandedWebhookDeliveries ends what they leave.
const webhookJobMaxAttempts = WebhookMaxAttempts + 1

// WebhookDeliveryArgs is the River job of one webhook delivery: the next
// attempt (or attempts, with River's retries) of the delivery with this id.
type WebhookDeliveryArgs struct {
	DeliveryID string `json:"delivery_id"`
}

// Kind is the job's kind in river_job.
func (WebhookDeliveryArgs) Kind() string { return "webhook_delivery" }

// activeJobStates are the states in which a delivery's job is waiting or
// running: a delivery has at most one job in them (River's unique jobs), so
// no two attempts of a delivery are ever queued or in flight at once.
var activeJobStates = []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
	rivertype.JobStateRetryable, rivertype.JobStateRunning, rivertype.JobStateScheduled}

// InsertOpts are the job's insert options: the webhooks queue, the delivery's
// attempts and the closing run (webhookJobMaxAttempts), and unique by
// delivery among waiting and running jobs.
func (WebhookDeliveryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: WebhookQueue, MaxAttempts: webhookJobMaxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: activeJobStates}}
}

// riverInserter returns the store's insert-only River client (no queues, no
// workers: it starts nothing), made on first use.
func (db *DB) riverInserter() (*river.Client[pgx.Tx], error) {
	db.riverOnce.Do(func() {
		db.riverClient, db.riverErr = river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: db.log})
	})
	return db.riverClient, db.riverErr
}

// insertJobs inserts River jobs in tx, which must be a transaction of
// db's pool (the dispatcher's, or a unit of work's: see pgxTxOf).
func (db *DB) insertJobs(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	c, err := db.riverInserter()
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	res, err := c.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	return res, nil
}

// pgxTxOf returns q as a pgx.Tx, for libraries that take one (River): a
// pgx.Tx as it is, or a unit of work's transaction (begun, and what it
// deferred sent, first) as a unitTx.
func pgxTxOf(ctx context.Context, q Querier) (pgx.Tx, error) {
	switch t := q.(type) {
	case pgx.Tx:
		return t, nil
	case *pipelinedTx:
		if err := t.flush(ctx); err != nil {
			return nil, err
		}
		return unitTx{t: t}, nil
	}
	return nil, fmt.Errorf("%T is not a transaction", q)
}

// unitTx is a unit of work's transaction as a pgx.Tx. Its statements join the
// unit of work; Begin makes a savepoint, which Commit releases and Rollback
// rolls back to; the unit of work itself is ended by UnitOfWork, so Commit and
// Rollback of the top level fail.
type unitTx struct {
	t *pipelinedTx
	// savepoint names the savepoint this level is ("" at the top).
	savepoint string
}

var _ pgx.Tx = unitTx{}

// errUnitTxEnd refuses to end a unit of work through its pgx.Tx.
var errUnitTxEnd = errors.New("store: a unit of work ends with UnitOfWork, not through its pgx.Tx")

// Begin makes a savepoint.
func (u unitTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := u.t.flush(ctx); err != nil {
		return nil, err
	}
	u.t.savepoints++
	name := fmt.Sprintf("taskflow_sp_%d", u.t.savepoints)
	if _, err := u.t.Exec(ctx, "SAVEPOINT "+name); err != nil {
		return nil, err
	}
	return unitTx{t: u.t, savepoint: name}, nil
}

// Commit releases the savepoint.
func (u unitTx) Commit(ctx context.Context) error {
	if u.savepoint == "" {
		return errUnitTxEnd
	}
	_, err := u.t.Exec(ctx, "RELEASE SAVEPOINT "+u.savepoint)
	return err
}

// Rollback rolls back to the savepoint.
func (u unitTx) Rollback(ctx context.Context) error {
	if u.savepoint == "" {
		return errUnitTxEnd
	}
	_, err := u.t.Exec(ctx, "ROLLBACK TO SAVEPOINT "+u.savepoint)
	return err
}

// CopyFrom copies rows into a table in the transaction.
func (u unitTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := u.t.flush(ctx); err != nil {
		return 0, err
	}
	n, err := u.t.conn.CopyFrom(ctx, table, columns, rows)
	return n, u.t.failedIf(err)
}

// SendBatch sends b in the transaction.
func (u unitTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return u.t.SendBatch(ctx, b)
}

// LargeObjects is not offered: the zero value.
func (u unitTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Prepare prepares a statement on the transaction's connection.
func (u unitTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := u.t.flush(ctx); err != nil {
		return nil, err
	}
	return u.t.conn.Conn().Prepare(ctx, name, sql)
}

// Exec runs sql in the transaction.
func (u unitTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return u.t.Exec(ctx, sql, args...)
}

// Query runs sql in the transaction.
func (u unitTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return u.t.Query(ctx, sql, args...)
}

// QueryRow runs sql in the transaction.
func (u unitTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return u.t.QueryRow(ctx, sql, args...)
}

// Conn returns the transaction's connection.
func (u unitTx) Conn() *pgx.Conn { return u.t.conn.Conn() }

// newRiverMigrator returns River's migrator for pool.
func newRiverMigrator(pool *pgxpool.Pool) (*rivermigrate.Migrator[pgx.Tx], error) {
	return rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
}

// migrateRiver applies River's migrations (river_job and its tables), each
// in a transaction of its own under the migrations' lock, so that instances
// starting together apply each once, as TaskFlow's own. (One transaction for
// all of them fails: a later one uses an enum value an earlier one adds.)
func migrateRiver(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := newRiverMigrator(pool)
	if err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	for done := false; !done; {
		err = underMigrationLock(ctx, pool, func(tx pgx.Tx) error {
			res, err := m.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{MaxSteps: 1})
			done = err == nil && len(res.Versions) == 0
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate river: %w", err)
		}
	}
	return nil
}

// hashRiverMigrations writes River's migrations into h, for MigrationsHash: a
// River upgrade that brings a migration changes the schema too.
func hashRiverMigrations(h io.Writer) error {
	m, err := newRiverMigrator(nil)
	if err != nil {
		return err
	}
	for _, v := range m.AllVersions() {
		sum := sha256.Sum256([]byte(v.SQLUp))
		fmt.Fprintf(h, "river\x00%d\x00%x\x00", v.Version, sum)
	}
	return nil
}
