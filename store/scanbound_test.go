package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"taskflow/store"
)

// scanBoundEvents inserts n task.created events of the workspace ws by SQL,
// one a second from 2026-05-01.
func scanBoundEvents(t *testing.T, db *store.DB, ws, actor string, n int) {
	t.Helper()
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid, 'task.created', 'task', i::text,
			'2026-05-01T00:00:00Z'::timestamptz + i * interval '1 second', '{}'::jsonb
		FROM generate_series(1, $3::int) i`, ws, actor, n); err != nil {
		t.Fatal(err)
	}
}

// A page of auditEvents (and a page of the export) whose scan looked at
// exactly AuditScanLimit events said it was cut short even when the log had
// no event after them: hasNextPage, and the client read one more page,
// empty, which looked at nothing. A page now knows whether an event follows
// the last it looked at (it reads one more, not looked at nor charged), and
// is cut only then; 9,999, 10,000 and 10,001 events of which none match.
func TestAuditScanAtItsBound(t *testing.T) {
	t.Parallel()
	for _, n := range []int{store.AuditScanLimit - 1, store.AuditScanLimit, store.AuditScanLimit + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			f := newAuditFixture(t)
			ctx := context.Background()
			owner := f.user("Owner")
			ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
			scanBoundEvents(t, f.db, ws, owner.ID, n)
			// No index serves a prefix of actions: the scan looks at every
			// event and keeps none.
			filter := store.AuditFilter{Actions: []string{"comment.*"}}
			want := fmt.Sprint([]int{n})
			if n > store.AuditScanLimit {
				want = fmt.Sprint([]int{store.AuditScanLimit, n - store.AuditScanLimit})
			}

			var looked, bounds []int
			var after *string
			for pages := 0; ; pages++ {
				if pages > 3 {
					t.Fatal("too many pages")
				}
				c, err := f.db.AuditPage(ctx, owner, ws, filter, auditPtr(10), after,
					func(k int) error { bounds = append(bounds, k); return nil },
					func(k int) error { looked = append(looked, k); return nil })
				if err != nil {
					t.Fatal(err)
				}
				if len(c.Nodes()) != 0 {
					t.Fatalf("page %d: %d events, want none", pages, len(c.Nodes()))
				}
				if !c.PageInfo.HasNextPage {
					break
				}
				after = c.PageInfo.EndCursor()
			}
			if fmt.Sprint(looked) != want {
				t.Errorf("auditEvents over %d events: pages looked at %v events, want %s", n, looked, want)
			}
			if len(bounds) != len(looked) || bounds[0] != store.AuditScanLimit {
				t.Errorf("auditEvents over %d events: bounds %v before pages that looked at %v", n, bounds, looked)
			}
			// A filter its index serves whole reads a page and one more.
			bounds = nil
			if _, err := f.db.AuditPage(ctx, owner, ws, store.AuditFilter{}, auditPtr(10), nil,
				func(k int) error { bounds = append(bounds, k); return nil }, nil); err != nil || fmt.Sprint(bounds) != "[11]" {
				t.Errorf("an unfiltered page: bounds %v, %v; want [11]", bounds, err)
			}

			looked = nil
			var pages []int
			err := f.db.EachAuditEvent(ctx, owner, ws, filter,
				func(p, scan int) error {
					if scan != store.AuditScanLimit {
						t.Errorf("export page %d may look at %d events, want %d", p, scan, store.AuditScanLimit)
					}
					pages = append(pages, p)
					return nil
				},
				func(k int) error { looked = append(looked, k); return nil },
				func(*store.AuditEvent) error { t.Fatal("an event matched"); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(looked) != want {
				t.Errorf("export over %d events: %d pages looked at %v events, want %s", n, len(pages), looked, want)
			}
		})
	}
}

// A read of the spine whose scan looked at exactly MaxScan events was Cut
// even when no event followed them below the horizon, and its reader (a
// subscription's catch-up) read again from Next, looking at nothing. It is
// now Cut only when an event follows; Examined stays what it looked at.
func TestSpineScanAtItsBound(t *testing.T) {
	t.Parallel()
	const max = 1000
	for _, n := range []int{max - 1, max, max + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			f := newAuditFixture(t)
			ctx := t.Context()
			var start store.SpineCursor
			if err := f.db.Pool.QueryRow(ctx, `SELECT coalesce(max(tx_id)::text::bigint, 0), coalesce(max(seq), 0) FROM audit_events`).
				Scan(&start.TxID, &start.Seq); err != nil {
				t.Fatal(err)
			}
			var last string
			if err := f.db.Pool.QueryRow(ctx, `WITH i AS (INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at)
				SELECT gen_random_uuid(), 'noise', 'task.created', 'task', 'e', now() FROM generate_series(1, $1::int) RETURNING tx_id)
				SELECT max(tx_id)::text FROM i`, n).Scan(&last); err != nil {
				t.Fatal(err)
			}
			for passed := false; !passed; time.Sleep(5 * time.Millisecond) {
				if err := f.db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, last).Scan(&passed); err != nil {
					t.Fatal(err)
				}
			}
			filter := store.SpineFilter{ChainKeys: []string{"mine"}, MaxScan: max}
			var examined []int
			var cut []bool
			for cur := start; len(examined) < 4; {
				r, err := f.db.ReadSpine(ctx, cur, filter, 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Events) != 0 {
					t.Fatalf("kept %d events, want none", len(r.Events))
				}
				examined, cut = append(examined, r.Examined), append(cut, r.Cut)
				if cur = r.Next; !r.Cut {
					break
				}
			}
			want := fmt.Sprint([]int{n}, []bool{false})
			if n > max {
				want = fmt.Sprint([]int{max, n - max}, []bool{true, false})
			}
			if got := fmt.Sprint(examined, cut); got != want {
				t.Errorf("reads over %d events with MaxScan %d: examined and cut %s, want %s", n, max, got, want)
			}
		})
	}
}
