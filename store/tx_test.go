package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
	rec := &roundTrips{batch: map[*pgx.Conn][]string{}}
	pool := storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
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
	deferred := func(v int) step {
		return func(ctx context.Context, _ store.Querier) error {
			store.Defer(ctx, `SELECT $1::int`, v)
			return nil
		}
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
		// Deferred statements wait for the next statement, or for COMMIT.
		{"deferred", []step{deferred(6), exec}, []string{"begin ; select $1::int ; select $1::int", "commit"}},
		{"deferred last", []step{exec, deferred(7)}, []string{"begin ; select $1::int", "select $1::int ; commit"}},
		{"deferred only", []step{deferred(8)}, []string{"begin ; select $1::int ; commit"}},
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

// A claim made ahead goes in the round trip that begins the unit of work, with
// its first statement, and leaves the lock timeout as it was. A repeat gets the
// record; its first statement ran but is rolled back, and no later statement
// is sent. A key held by a running transaction is busy, and the first
// statement's lock waits are bounded by the claim's wait meanwhile.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	db, pool, rec := tracedDB(t)
	ctx := t.Context()
	u := mkUser(t, db, "ahead@example.com")
	if _, err := pool.Exec(ctx, `CREATE TABLE t (v int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var timeout string
	if err := pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	rec.take()

	insert := func(ctx context.Context, v int) error {
		_, err := store.TxFrom(ctx).Exec(ctx, `INSERT INTO t VALUES ($1)`, v)
		return err
	}
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		c, err := db.ClaimIdempotencyKeyAhead(ctx, u.ID, "k", "f", []byte("fp"), time.Hour, time.Second)
		if err != nil {
			return err
		}
		if err := insert(ctx, 1); err != nil {
			return err
		}
		var now string
		if err := store.TxFrom(ctx).QueryRow(ctx, `SHOW lock_timeout`).Scan(&now); err != nil || now != timeout {
			t.Errorf("lock_timeout %q (%v) after the claim, %q before", now, err, timeout)
		}
		if r, err := c.Result(ctx); r != nil || err != nil {
			t.Fatalf("first claim: %+v %v", r, err)
		}
		return db.SaveIdempotencyResult(ctx, u.ID, "k", []byte(`{"v": 1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	trips := rec.take()
	if len(trips) != 3 || !strings.HasPrefix(trips[0], "begin ; select l.locked, r.field") ||
		!strings.HasSuffix(trips[0], "; insert into t values ($1)") ||
		!strings.HasPrefix(trips[2], "insert into idempotency_keys") || !strings.HasSuffix(trips[2], "; commit") {
		t.Fatalf("round trips %q: want the claim with BEGIN and the first statement, then SHOW, then the record with COMMIT", trips)
	}

	// A repeat: the first statement is dropped and rolled back, nothing after it is sent.
	for _, v := range []int{2, 1} { // 1 would fail on its own: the claim is read first
		err = db.UnitOfWork(ctx, func(ctx context.Context) error {
			c, err := db.ClaimIdempotencyKeyAhead(ctx, u.ID, "k", "f", []byte("fp"), time.Hour, time.Second)
			if err != nil {
				return err
			}
			ierr := insert(ctx, v)
			if again := insert(ctx, v+10); ierr == nil || again == nil {
				t.Fatalf("statements of a repeat: %v, then %v", ierr, again)
			}
			r, err := c.Result(ctx)
			if err != nil || r == nil || string(r.Result) != `{"v": 1}` || r.Field != "f" {
				t.Fatalf("repeat: %+v %v", r, err)
			}
			return errors.New("replayed")
		})
		if err == nil || err.Error() != "replayed" {
			t.Fatalf("repeat: %v", err)
		}
		if trips := rec.take(); len(trips) != 2 || trips[1] != "rollback" {
			t.Fatalf("round trips of a repeat %q", trips)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v), want the first run's only", n, err)
	}
	rec.take()

	// A resolver that sends nothing: Result sends the claim with BEGIN.
	err = db.UnitOfWork(ctx, func(ctx context.Context) error {
		c, err := db.ClaimIdempotencyKeyAhead(ctx, u.ID, "k2", "f", []byte("fp"), time.Hour, time.Second)
		if err != nil {
			return err
		}
		if r, err := c.Result(ctx); r != nil || err != nil {
			t.Fatalf("claim with nothing sent: %+v %v", r, err)
		}
		if _, err := db.ClaimIdempotencyKeyAhead(ctx, u.ID, "k3", "f", []byte("fp"), time.Hour, time.Second); err == nil {
			t.Fatal("a claim ahead after the first round trip was accepted")
		}
		return errors.New("no effect")
	})
	if err == nil || err.Error() != "no effect" {
		t.Fatal(err)
	}
	if trips := rec.take(); len(trips) != 2 || !strings.HasPrefix(trips[0], "begin ; select l.locked") || trips[1] != "rollback" {
		t.Fatalf("round trips %q", trips)
	}

	// Busy: another transaction holds the key and the row the first statement locks.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "idempotency:"+u.ID+":busy"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT * FROM t WHERE v = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second) // fails the test rather than hanging it
	defer cancel()
	err = db.UnitOfWork(bounded, func(ctx context.Context) error {
		c, err := db.ClaimIdempotencyKeyAhead(ctx, u.ID, "busy", "f", []byte("fp"), time.Hour, 50*time.Millisecond)
		if err != nil {
			return err
		}
		var v int
		if err := store.TxFrom(ctx).QueryRow(ctx, `SELECT v FROM t WHERE v = $1 FOR UPDATE`, 1).Scan(&v); err == nil {
			t.Fatal("the first statement's result reached the caller of a busy claim")
		}
		_, err = c.Result(ctx)
		return err
	})
	if !errors.Is(err, store.ErrIdempotencyKeyBusy) || bounded.Err() != nil {
		t.Fatalf("claim of a held key: %v (context: %v)", err, bounded.Err())
	}
	if n := pool.Stat().AcquiredConns(); n != 1 { // the holder's
		t.Fatalf("%d connections acquired, want the holder's only", n)
	}
}
