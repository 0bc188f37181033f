package store_test

import (
	"context"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Four instances migrating one empty database at once all succeed, and each
// migration is applied exactly once.
func TestMigrateConcurrentIdempotent(t *testing.T) {
	t.Parallel()
	migrateConcurrently(t, pgtestdb.Custom(t, storetest.Config(t), pgtestdb.NoopMigrator{}).URL())
}

// The same through a transaction-mode pooler (PgBouncer with pool_mode =
// transaction), where consecutive transactions of one client connection may
// run in different server sessions: Migrate keeps nothing in a session between
// transactions, so four instances still apply each migration once and a later
// start is not blocked by a lock left behind. (The runner before 2026-12-01,
// with a session advisory lock, failed this: duplicate keys in pg_type, lock
// timeouts, and every later start blocked.) It runs when TEST_PGBOUNCER_URL
// is such a pooler in front of the test server, as
// postgres://postgres@127.0.0.1:6439/, its [databases] section mapping every
// name to the server ("* = host=127.0.0.1 port=5432 user=postgres").
func TestMigrateThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	pooler := os.Getenv("TEST_PGBOUNCER_URL")
	if pooler == "" {
		t.Skip("TEST_PGBOUNCER_URL is unset: no transaction-mode pooler to test through")
	}
	direct, err := url.Parse(pgtestdb.Custom(t, storetest.Config(t), pgtestdb.NoopMigrator{}).URL())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(pooler)
	if err != nil {
		t.Fatalf("TEST_PGBOUNCER_URL: %v", err)
	}
	u.Path = direct.Path
	// PgBouncer before 1.21 cannot carry prepared statements between
	// transactions: the simple protocol, as a deployment behind it would use.
	u.RawQuery = "default_query_exec_mode=simple_protocol"
	migrateConcurrently(t, u.String())
}

// migrateConcurrently migrates the empty database at dbURL from four pools at
// once, then once more, and checks that every migration was applied once.
func migrateConcurrently(t *testing.T, dbURL string) {
	t.Helper()
	// A bound on a hang (a lock left behind), not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	migrate := func() error {
		pool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		return store.Migrate(ctx, pool)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- migrate() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := migrate(); err != nil {
		t.Fatalf("a later start: %v", err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	files, err := migrationCount()
	if err != nil {
		t.Fatal(err)
	}
	if n != files {
		t.Fatalf("schema_migrations has %d rows, want %d", n, files)
	}
}

func migrationCount() (int, error) {
	entries, err := os.ReadDir("migrations")
	return len(entries), err
}
