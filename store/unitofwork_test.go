package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

func TestContextOutlivingUnitOfWorkHasNoTx(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	var inner context.Context
	if err := db.UnitOfWork(t.Context(), func(ctx context.Context) error {
		if store.TxFrom(ctx) == nil {
			t.Fatal("no transaction inside the unit of work")
		}
		inner = ctx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if store.TxFrom(inner) != nil {
		t.Fatal("a context kept after the unit of work still carries its closed transaction")
	}
	// A store read with it after the end goes to the pool, not to the closed tx.
	_, err := db.RoleIn(inner, "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000", "workspace")
	if errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("read after the unit of work: %v", err)
	}
}

// An idempotency result is written when the unit of work ends, in the batch
// that inserts its audit event or without one, and a result
// that cannot be stored rolls the whole unit of work back.
func TestIdempotencyResultWrittenAtCommit(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	u := mkUser(t, db, "keys@example.com")
	result := func(key string) string {
		var r *string
		if err := db.Pool.QueryRow(ctx, `SELECT result::text FROM idempotency_keys WHERE user_id = $1 AND key = $2`, u.ID, key).Scan(&r); err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
		if r == nil {
			return ""
		}
		return *r
	}
	claimAndSave := func(ctx context.Context, key string, save string) error {
		if _, err := db.ClaimIdempotencyKey(ctx, u.ID, key, "f", []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		return db.SaveIdempotencyResult(ctx, u.ID, key, []byte(save))
	}

	// With an audit event (CreateWorkspace records workspace.created).
	if err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if err := claimAndSave(ctx, "with-audit", `{"a": 1}`); err != nil {
			return err
		}
		_, err := db.CreateWorkspace(ctx, u, "W")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := result("with-audit"); got != `{"a": 1}` {
		t.Fatalf("stored with an audit event: %q", got)
	}
	// Without one.
	if err := db.UnitOfWork(ctx, func(ctx context.Context) error { return claimAndSave(ctx, "alone", `{"b": 2}`) }); err != nil {
		t.Fatal(err)
	}
	if got := result("alone"); got != `{"b": 2}` {
		t.Fatalf("stored alone: %q", got)
	}
	// A result for a key that was never claimed fails the unit of work at its
	// end, and nothing of it stays: not the workspace, not its audit event.
	var workspaces int
	count := func() int {
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM workspaces`).Scan(&workspaces); err != nil {
			t.Fatal(err)
		}
		return workspaces
	}
	before := count()
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if err := db.SaveIdempotencyResult(ctx, u.ID, "never-claimed", []byte(`{}`)); err != nil {
			return err
		}
		_, err := db.CreateWorkspace(ctx, u, "Lost")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "key not claimed") {
		t.Fatalf("unclaimed key: %v", err)
	}
	if count() != before {
		t.Fatal("the workspace of a failed unit of work was committed")
	}
	if err := db.SaveIdempotencyResult(ctx, u.ID, "x", nil); !errors.Is(err, store.ErrNoUnitOfWork) {
		t.Fatalf("outside a unit of work: %v", err)
	}
}

// Loaders take ids in every form uuid.Parse accepts without failing the batch
// (their array is built from canonical forms), and skip malformed ones.
func TestUsersByIDsAnyIDForm(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	u := mkUser(t, db, "forms@example.com")
	got, err := db.UsersByIDs(t.Context(), []string{u.ID, "{" + u.ID + "}", "urn:uuid:" + u.ID,
		strings.ReplaceAll(u.ID, "-", ""), "not-a-uuid", "a,b}"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[u.ID] == nil {
		t.Fatalf("users by ids: %v", got)
	}
}

// A claim bounds only its own wait: the mutation's statements that follow run
// with the lock timeout the session had.
func TestClaimRestoresLockTimeout(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	u := mkUser(t, db, "timeout@example.com")
	err := db.UnitOfWork(t.Context(), func(ctx context.Context) error {
		tx := store.TxFrom(ctx)
		var before, after string
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&before); err != nil {
			return err
		}
		rec, err := db.ClaimIdempotencyKey(ctx, u.ID, "k", "f", []byte("fp"), time.Hour, 3*time.Second)
		if err != nil || rec != nil {
			t.Fatalf("claim: %v %v", rec, err)
		}
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&after); err != nil {
			return err
		}
		if after != before || after == "3s" {
			t.Fatalf("lock_timeout %q after the claim, %q before", after, before)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A committed key replays even while another transaction holds the key's
// lock (a storm of retries of one key does not queue up), and a key with no
// record waits for the holder, bounded, then is IN_PROGRESS.
func TestClaimWithTheKeyHeld(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	u := mkUser(t, db, "held@example.com")
	if err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := db.ClaimIdempotencyKey(ctx, u.ID, "done", "f", []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		return db.SaveIdempotencyResult(ctx, u.ID, "done", []byte(`{"id": 1}`))
	}); err != nil {
		t.Fatal(err)
	}
	holder, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	for _, key := range []string{"done", "running"} {
		if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "idempotency:"+u.ID+":"+key); err != nil {
			t.Fatal(err)
		}
	}
	err = db.UnitOfWork(ctx, func(ctx context.Context) error {
		rec, err := db.ClaimIdempotencyKey(ctx, u.ID, "done", "f", []byte("fp"), time.Hour, 10*time.Millisecond)
		if err != nil || rec == nil || string(rec.Result) != `{"id": 1}` {
			t.Fatalf("replay with the key held: %+v %v", rec, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.UnitOfWork(ctx, func(ctx context.Context) error {
		_, err := db.ClaimIdempotencyKey(ctx, u.ID, "running", "f", []byte("fp"), time.Hour, 10*time.Millisecond)
		return err
	})
	if errs.CodeOf(err) != errs.CodeIdempotencyInProgress {
		t.Fatalf("claim of a key held by a running transaction: %v", err)
	}
	// A request's deadline (REQUEST_TIMEOUT) shorter than the wait: the
	// claim answers IN_PROGRESS within it, not a cancellation (TIMEOUT).
	bounded, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = db.UnitOfWork(bounded, func(ctx context.Context) error {
		_, err := db.ClaimIdempotencyKey(ctx, u.ID, "running", "f", []byte("fp"), time.Hour, time.Minute)
		return err
	})
	if errs.CodeOf(err) != errs.CodeIdempotencyInProgress {
		t.Fatalf("claim of a held key within a deadline shorter than its wait: %v, want IDEMPOTENCY_IN_PROGRESS", err)
	}
}

// A unit of work that claimed its key but finds, writing its record, a live
// record of the key (committed after its claim read the key, or by a version
// that took no lock) is refused with ErrIdempotencyKeyBusy, and nothing of it
// stays: its caller claims again and replays that record.
func TestIdempotencyRecordTakenRollsBack(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	u := mkUser(t, db, "taken@example.com")
	count := func() (n int) {
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM workspaces WHERE name = 'Twice'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if rec, err := db.ClaimIdempotencyKey(ctx, u.ID, "k", "f", []byte("fp"), time.Hour, time.Second); err != nil || rec != nil {
			t.Fatalf("claim: %+v %v", rec, err)
		}
		// Another writer of the key's record, which took no lock.
		if _, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys (user_id, key, field, fingerprint, result, expires_at)
			VALUES ($1, 'k', 'f', 'fp', '{"first": true}', now() + interval '1 hour')`, u.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateWorkspace(ctx, u, "Twice"); err != nil {
			return err
		}
		return db.SaveIdempotencyResult(ctx, u.ID, "k", []byte(`{"second": true}`))
	})
	if !errors.Is(err, store.ErrIdempotencyKeyBusy) {
		t.Errorf("unit of work over a taken record: %v, want ErrIdempotencyKeyBusy", err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d workspaces committed by a unit of work whose key's record was taken, want 0", n)
	}
	var result string
	if err := db.Pool.QueryRow(ctx, `SELECT result::text FROM idempotency_keys WHERE user_id = $1 AND key = 'k'`, u.ID).Scan(&result); err != nil || result != `{"first": true}` {
		t.Errorf("record %s (%v), want the first writer's", result, err)
	}
	// An expired record is still replaced.
	if _, err := db.Pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE user_id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if rec, err := db.ClaimIdempotencyKey(ctx, u.ID, "k", "f", []byte("fp"), time.Hour, time.Second); err != nil || rec != nil {
			t.Fatalf("claim of an expired key: %+v %v", rec, err)
		}
		return db.SaveIdempotencyResult(ctx, u.ID, "k", []byte(`{"third": true}`))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT result::text FROM idempotency_keys WHERE user_id = $1 AND key = 'k'`, u.ID).Scan(&result); err != nil || result != `{"third": true}` {
		t.Errorf("record %s (%v) after an expired one, want the new one", result, err)
	}
}

// The claim and the record read look a key up with an index scan even when
// Postgres misjudges how many rows a user's key matches (it multiplies the
// columns' selectivities: tens of rows for a user with many keys), where it
// took a bitmap heap scan, whose bitmap cost a keyed create more of
// Postgres's CPU than the rest of the claim.
func TestKeyReadsUseTheIndex(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	u := mkUser(t, db, "many-keys@example.com")
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		`INSERT INTO idempotency_keys (user_id, key, field, fingerprint, expires_at)
			SELECT '` + u.ID + `', 'k' || i, 'f', 'fp', now() + interval '1 day' FROM generate_series(1, 20000) i`,
		// Statistics as they drift between two ANALYZEs of a growing table.
		`ALTER TABLE idempotency_keys ALTER COLUMN key SET (n_distinct = 100)`,
		`ANALYZE idempotency_keys`,
		`SET plan_cache_mode = force_generic_plan`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET plan_cache_mode`)
	for name, c := range map[string]struct {
		sql  string
		args string
	}{
		"claim":  {store.ClaimSQL, `('l', '` + u.ID + `', 'k7', '5000')`},
		"record": {store.RecordSQL, `('` + u.ID + `', 'k7')`},
	} {
		if _, err := conn.Exec(ctx, `PREPARE `+name+` AS `+c.sql); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+name+c.args)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(plan, "\n"); !strings.Contains(p, "Index Scan using idempotency_keys_pkey") || strings.Contains(p, "Bitmap") {
			t.Errorf("%s's plan:\n%s\nwant an index scan of the primary key", name, p)
		}
	}
}
