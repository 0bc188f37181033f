package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
	"taskflow/store/storetest"
)

// roundTrips is a pgx tracer that records what each round trip of a pool sent:
// one entry per query sent alone, one per batch (its statements joined by " ; ").
type roundTrips struct {
	mu    sync.Mutex
	trips []string
	batch map[*pgx.Conn][]string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips = append(r.trips, strings.ToLower(strings.TrimSpace(d.SQL)))
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, c *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batch[c] = []string{}
	return ctx
}

func (r *roundTrips) TraceBatchQuery(_ context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batch[c] = append(r.batch[c], strings.ToLower(strings.TrimSpace(d.SQL)))
}

func (r *roundTrips) TraceBatchEnd(_ context.Context, c *pgx.Conn, _ pgx.TraceBatchEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips = append(r.trips, strings.Join(r.batch[c], " ; "))
	delete(r.batch, c)
}

// take returns the round trips recorded since the last call.
func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trips
	r.trips = nil
	return t
}

// tracedDB returns a store on a fresh database whose pool records its round trips.
func tracedDB(t *testing.T) (*store.DB, *pgxpool.Pool, *roundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rec := &roundTrips{batch: map[*pgx.Conn][]string{}}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool, nil), pool, rec
}

// A unit of work's BEGIN goes in the round trip of its first statement, whatever
// kind of statement that is; a unit of work that sends nothing sends no BEGIN
// either.
func TestUnitOfWorkBeginsWithItsFirstStatement(t *testing.T) {
	t.Parallel()
	db, pool, rec := tracedDB(t)
	ctx := t.Context()
	if err := pool.Ping(ctx); err != nil { // a connection ready, so nothing else shows
		t.Fatal(err)
	}
	rec.take()

	type step func(ctx context.Context, q store.Querier) error
	queryRow := func(ctx context.Context, q store.Querier) error {
		var n int
		return q.QueryRow(ctx, `SELECT $1::int`, 1).Scan(&n)
	}
	exec := func(ctx context.Context, q store.Querier) error {
		_, err := q.Exec(ctx, `SELECT $1::int`, 2)
		return err
	}
	batch := func(ctx context.Context, q store.Querier) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT $1::int`, 3)
		b.Queue(`SELECT $1::int`, 4)
		return q.SendBatch(ctx, b).Close()
	}
	query := func(ctx context.Context, q store.Querier) error {
		rows, err := q.Query(ctx, `SELECT $1::int`, 5)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
	for _, c := range []struct {
		name  string
		steps []step
		want  []string
	}{
		{"queryRow", []step{queryRow, exec}, []string{"begin ; select $1::int", "select $1::int", "commit"}},
		{"exec", []step{exec, queryRow}, []string{"begin ; select $1::int", "select $1::int", "commit"}},
		{"batch", []step{batch, exec}, []string{"begin ; select $1::int ; select $1::int", "select $1::int", "commit"}},
		// Rows outlive the call: a Query first waits for BEGIN.
		{"query", []step{query}, []string{"begin", "select $1::int", "commit"}},
		{"nothing", nil, nil},
	} {
		err := db.UnitOfWork(ctx, func(ctx context.Context) error {
			for _, s := range c.steps {
				if err := s(ctx, store.TxFrom(ctx)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := rec.take(); strings.Join(got, " | ") != strings.Join(c.want, " | ") {
			t.Errorf("%s: round trips %q, want %q", c.name, got, c.want)
		}
	}
}

// The statements of a unit of work share one transaction from the first on,
// and a failed first statement leaves no connection behind, whether Postgres
// refused it before BEGIN ran (it does not parse) or inside the transaction.
func TestUnitOfWorkFirstStatement(t *testing.T) {
	t.Parallel()
	db, pool, _ := tracedDB(t)
	ctx := t.Context()

	var first, second string
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		tx := store.TxFrom(ctx)
		if err := tx.QueryRow(ctx, `SELECT txid_current()::text || $1`, "").Scan(&first); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT txid_current()::text`).Scan(&second)
	})
	if err != nil || first == "" || first != second {
		t.Fatalf("transaction ids %q and %q (%v): not one transaction", first, second, err)
	}

	// An effect of the first statement commits with the unit of work, and
	// rolls back with it.
	if _, err := pool.Exec(ctx, `CREATE TABLE t (v int)`); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, v := range []int{1, 2} {
		err := db.UnitOfWork(ctx, func(ctx context.Context) error {
			if _, err := store.TxFrom(ctx).Exec(ctx, `INSERT INTO t VALUES ($1)`, v); err != nil {
				return err
			}
			if v == 2 {
				return boom
			}
			return nil
		})
		if (v == 2) != errors.Is(err, boom) {
			t.Fatalf("unit of work %d: %v", v, err)
		}
	}
	var got []int
	rows, _ := pool.Query(ctx, `SELECT v FROM t`)
	got, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(got) != 1 || got[0] != 1 {
		t.Fatalf("rows %v (%v), want [1]", got, err)
	}

	for _, bad := range []string{`SELEC $1::int`, `SELECT 1 / ($1::int - 1)`} {
		err := db.UnitOfWork(ctx, func(ctx context.Context) error {
			var n int
			return store.TxFrom(ctx).QueryRow(ctx, bad, 1).Scan(&n)
		})
		if err == nil {
			t.Fatalf("%s: no error", bad)
		}
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Fatalf("%s: %d connections still acquired", bad, n)
		}
	}
	// No connection went back to the pool inside a transaction.
	for _, c := range pool.AcquireAllIdle(ctx) {
		if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("a pooled connection in transaction state %q", st)
		}
		c.Release()
	}
}
