package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
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
// attempts, and unique by delivery among waiting and running jobs.
func (WebhookDeliveryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: WebhookQueue, MaxAttempts: WebhookMaxAttempts,
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

// pgxTxOf returns the pgx transaction under q, a unit of work's transaction
// (which it begins if nothing has been sent yet) or a pgx.Tx, for libraries
// that take a pgx.Tx (River).
func pgxTxOf(ctx context.Context, q Querier) (pgx.Tx, error) {
	switch t := q.(type) {
	case pgx.Tx:
		return t, nil
	case *pipelinedTx:
		if err := t.begin(ctx); err != nil {
			return nil, err
		}
		return t.tx, nil
	}
	return nil, fmt.Errorf("%T is not a transaction", q)
}

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
