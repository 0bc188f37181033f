// Package storetest gives each test its own migrated Postgres database, cloned from
// a template that is migrated once per schema version, so tests run in parallel.
package storetest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgtestdb uses
	"github.com/peterldowns/pgtestdb"

	"taskflow/store"
)

// DefaultURL is the server tests use when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// migrator applies store's embedded migrations to pgtestdb's template database.
type migrator struct{}

// Hash identifies the schema by the migrations' text.
func (migrator) Hash() (string, error) { return store.MigrationsHash() }

// Migrate applies the migrations through a pgx pool.
func (migrator) Migrate(ctx context.Context, _ *sql.DB, conf pgtestdb.Config) error {
	pool, err := pgxpool.New(ctx, conf.URL())
	if err != nil {
		return err
	}
	defer pool.Close()
	return store.Migrate(ctx, pool)
}

// Config returns the connection settings of the Postgres server for tests, from
// TEST_DATABASE_URL or DefaultURL.
func Config(t testing.TB) pgtestdb.Config {
	t.Helper()
	raw := os.Getenv("TEST_DATABASE_URL")
	if raw == "" {
		raw = DefaultURL
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	pw, _ := u.User.Password()
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	opts := u.RawQuery
	if opts == "" {
		opts = "sslmode=disable"
	}
	return pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      u.Hostname(),
		Port:                      port,
		User:                      u.User.Username(),
		Password:                  pw,
		Database:                  trimSlash(u.Path),
		Options:                   opts,
		ForceTerminateConnections: true,
	}
}

func trimSlash(p string) string {
	if len(p) > 0 && p[0] == '/' {
		return p[1:]
	}
	if p == "" {
		return "postgres"
	}
	return p
}

// URL creates a fresh migrated database for this test and returns its URL. The
// database is dropped when the test passes.
func URL(t testing.TB) string {
	t.Helper()
	return pgtestdb.Custom(t, Config(t), migrator{}).URL()
}

// Pool returns a pool on a fresh migrated database, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolWith(t, func(*pgxpool.Config) {})
}

// PoolWith is Pool with its configuration changed by configure first (a
// tracer that counts statements, a pool size).
func PoolWith(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	store.UTCTimes(cfg) // as the server's pools (store.PoolConfig)
	store.CancelStatements(cfg)
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DB returns a store on a fresh migrated database.
func DB(t testing.TB) *store.DB {
	t.Helper()
	return store.New(Pool(t), nil)
}

// SealAll runs rounds of sealer until every committed audit event of db's
// database is sealed (or fails the test after a minute: the spine's horizon is
// the whole cluster's, so another database's long transaction delays it).
func SealAll(t testing.TB, sealer *store.AuditSealer) {
	t.Helper()
	catchUp(t, "seal", func(ctx context.Context) error {
		_, err := sealer.Round(ctx)
		return err
	}, func(ctx context.Context) (int, error) {
		b, err := sealer.DB.AuditSealBacklog(ctx)
		return b.Events, err
	})
}

// catchUp runs round until backlog is 0, failing the test on an error or
// after a minute.
func catchUp(t testing.TB, what string, round func(context.Context) error, backlog func(context.Context) (int, error)) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		if err := round(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n, err := backlog(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d events still waiting after a minute", what, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Seal is SealAll with a sealer on db that signs no checkpoints.
func Seal(t testing.TB, db *store.DB) {
	t.Helper()
	SealAll(t, &store.AuditSealer{DB: db})
}

// DispatchAll runs rounds of a webhook dispatcher on db until it has reached
// every committed audit event (or fails the test after a minute, as SealAll).
func DispatchAll(t testing.TB, db *store.DB) {
	t.Helper()
	d := &store.WebhookDispatcher{DB: db}
	catchUp(t, "dispatch", func(ctx context.Context) error {
		_, err := d.Round(ctx)
		return err
	}, db.WebhookDispatchBacklog)
}
