package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"taskflow/audit"
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

// A log chained in its rows before migration 0007 (with a retention anchor)
// becomes seals at the same positions: it verifies as it did, its rows are not
// on the spine, and new events are sealed after its head.
func TestMigrateSealsLegacyChains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := poolMigratedBefore(t, "0007")
	// The old store's writes: a workspace chain that lost two events to
	// retention, and an account chain.
	ws, user := uuid.NewString(), uuid.NewString()
	legacy := func(chain string, anchor []byte, dropped, n int) []string {
		prev := anchor
		var ids []string
		var last audit.Record
		for i := range n {
			r := audit.Record{ID: uuid.NewString(), ChainKey: chain, Action: "task.created", EntityType: "task",
				EntityID: fmt.Sprint(i), OccurredAt: time.Date(2020, 1, 1+i, 0, 0, 0, 0, time.UTC), Metadata: map[string]any{"i": json.Number(fmt.Sprint(i))}}
			if chain == ws {
				r.WorkspaceID = &ws
			}
			hash, err := audit.Hash(prev, r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, workspace_id, action, entity_type, entity_id, occurred_at, metadata, prev_hash, hash)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, r.ID, chain, r.WorkspaceID, r.Action, r.EntityType, r.EntityID, r.OccurredAt, r.Metadata, prev, hash); err != nil {
				t.Fatal(err)
			}
			prev, last = hash, r
			ids = append(ids, r.ID)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO audit_chain_heads (chain_key, head_hash, event_id, event_at, events) VALUES ($1, $2, $3, $4, $5)`,
			chain, prev, last.ID, last.OccurredAt, dropped+n); err != nil {
			t.Fatal(err)
		}
		if anchor != nil {
			if _, err := pool.Exec(ctx, `INSERT INTO audit_chain_anchors (chain_key, hash, event_id, event_at, events) VALUES ($1, $2, $3, $4, $5)`,
				chain, anchor, uuid.NewString(), time.Date(2019, 12, 1, 0, 0, 0, 0, time.UTC), dropped); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	anchor := bytes.Repeat([]byte{7}, 32)
	wsIDs := legacy(ws, anchor, 2, 3)
	legacy("user:"+user, nil, 0, 2)

	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	db := store.New(pool, nil)
	for chain, want := range map[string][2]int{ws: {3, 5}, "user:" + user: {2, 2}} {
		v, err := db.VerifyChain(ctx, chain)
		if err != nil || !v.Valid || v.SealedEvents != want[0] || v.UnsealedEvents != 0 || v.HeadPosition == nil || *v.HeadPosition != int64(want[1]) {
			t.Fatalf("%s after the migration: %+v, %v", chain, v, err)
		}
	}
	var first int64
	if err := pool.QueryRow(ctx, `SELECT position FROM audit_seals WHERE event_id = $1`, wsIDs[0]).Scan(&first); err != nil || first != 3 {
		t.Fatalf("the first legacy event after the anchor at position %d (%v), want 3", first, err)
	}
	if r, err := db.ReadSpine(ctx, store.SpineCursor{}, store.SpineFilter{}, 10); err != nil || len(r.Events) != 0 {
		t.Fatalf("legacy rows on the spine: %+v, %v", r, err)
	}
	if err := store.AppendAuditAt(ctx, db, audit.Event{WorkspaceID: &ws, Action: "task.deleted", EntityID: "0"}, nil); err != nil {
		t.Fatal(err)
	}
	storetest.Seal(t, db)
	if v, err := db.VerifyChain(ctx, ws); err != nil || !v.Valid || v.SealedEvents != 4 || *v.HeadPosition != 6 {
		t.Fatalf("after a new event: %+v, %v", v, err)
	}
}
