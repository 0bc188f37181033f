package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
	"taskflow/store/storetest"
)

func TestPoolConfigSize(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]int32{
		"postgres://u@127.0.0.1:5432/db":                  store.DefaultPoolMaxConns,
		"postgres://u@127.0.0.1:5432/db?pool_max_conns=7": 7,
		"host=127.0.0.1 dbname=db pool_max_conns=3":       3,
		"host=127.0.0.1 dbname=db":                        store.DefaultPoolMaxConns,
	} {
		cfg, err := store.PoolConfig(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if cfg.MaxConns != want {
			t.Errorf("%s: MaxConns %d, want %d", url, cfg.MaxConns, want)
		}
	}
}

// A statement whose context ends is stopped in Postgres by a cancel request,
// and its connection kept: pgx's default closes the connection, sending the
// cancel request as it closes, so that every statement cut short by a
// request's deadline costs a new connection (TCP, TLS, authentication) when
// the pool needs one, which a wave of timeouts turns into a storm.
func TestPoolConfigCancelsStatementsInPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.URL(t)
	cfg, err := store.PoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "cancelled-statement-test"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The lock, held by another session; and a session that watches.
	holder, observer := connect(t, url), connect(t, url)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `LOCK TABLE users IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	stmtCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	var n int
	err = pool.QueryRow(stmtCtx, `SELECT count(*) FROM users`).Scan(&n)
	if err == nil {
		t.Fatal("the statement ran through an ACCESS EXCLUSIVE lock")
	}
	if !store.Transient(err) {
		t.Fatalf("the cancelled statement failed with %v, not a failure of the moment", err)
	}
	// No backend of the pool still waits on the lock (a bounded poll: the
	// cancel request reaches Postgres on a connection of its own).
	waiting := -1
	for range 100 {
		if err := observer.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'cancelled-statement-test' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waiting != 0 {
		t.Fatalf("%d backends of the pool still wait on the lock after their statement's context ended", waiting)
	}
	// The connection was kept (pgx's default closes it, and cancels the
	// statement as it closes): the next statement runs on it, with no new
	// connection (TCP, TLS, authentication; through PgBouncer too).
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&n); err != nil {
		t.Fatalf("after the cancel: %v", err)
	}
	if made := pool.Stat().NewConnsCount(); made != 1 {
		t.Errorf("the pool made %d connections, want 1: the cancelled statement's connection was closed", made)
	}
}

// connect opens a plain connection to url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
