package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"taskflow/store"
	"taskflow/store/storetest"
)

// TestSpineClockFindsALogicalRestore: a database whose audit events or spine
// cursors carry transaction ids this cluster has not assigned yet (restored
// from a pg_dump of another cluster) is found, naming both ids; a database
// written by this cluster is not.
func TestSpineClockFindsALogicalRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, forge string
	}{
		{"an event", `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, tx_id, seq)
			VALUES (gen_random_uuid(), 'anonymous', 'session.login_failed', 'user', 'x', now(), '1099511627776', 1)`},
		{"the sealer's cursor", `UPDATE audit_seal_cursor SET tx_id = '1099511627776' WHERE id = 1`},
		{"the dispatcher's cursor", `UPDATE webhook_dispatch_cursor SET tx_id = '1099511627776' WHERE id = 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := storetest.DB(t)
			owner := mkUser(t, db, "clock@example.com")
			if _, err := db.CreateWorkspace(ctx, owner, "W"); err != nil {
				t.Fatal(err)
			}
			storetest.Seal(t, db)
			if err := db.CheckSpineClock(ctx); err != nil {
				t.Fatalf("a database this cluster wrote: %v", err)
			}
			if _, err := db.Pool.Exec(ctx, tc.forge); err != nil {
				t.Fatal(err)
			}
			err := db.CheckSpineClock(ctx)
			if !errors.Is(err, store.ErrSpineAhead) || !strings.Contains(err.Error(), "highest id 1099511627776") {
				t.Fatalf("with %s past the cluster's ids: %v, want ErrSpineAhead naming the id", tc.name, err)
			}
		})
	}
}
