package store_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Four instances migrating one empty database at once all succeed, and each
// migration is applied exactly once.
func TestMigrateConcurrentIdempotent(t *testing.T) {
	t.Parallel()
	url := pgtestdb.Custom(t, storetest.Config(t), pgtestdb.NoopMigrator{}).URL()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer pool.Close()
			errs <- store.Migrate(ctx, pool)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	pool, err := pgxpool.New(ctx, url)
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
