package httpapi_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

// scanEvents inserts n events of the workspace ws (actor actor) by SQL, one
// a second from 2026-05-01, with action, entity type task and entity ids
// scanEntity(1)..scanEntity(n) (the first the oldest).
func scanEvents(t *testing.T, e interface {
	exec(t *testing.T, sql string, args ...any)
}, ws, actor, action string, n int) {
	t.Helper()
	e.exec(t, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid, $3, 'task', ('00000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid,
			'2026-05-01T00:00:00Z'::timestamptz + i * interval '1 second', '{}'::jsonb
		FROM generate_series(1, $4::int) i`, ws, actor, action, n)
}

// scanEntity is the entity id of scanEvents' i-th event.
func scanEntity(i int) string { return fmt.Sprintf("00000000-0000-0000-0000-%012d", i) }

func (e *auditEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.DB.Pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func (e *liveEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.DB.Pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// dayLimiter is a limiter of 1,000 points a day (what a test spends does not
// come back while it runs) with MAX_QUERY_COST maxCost (0: its default).
func dayLimiter(t *testing.T, maxCost int) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Window: 24 * time.Hour, MaxCost: maxCost},
		KeyPrefix: ratelimittest.Prefix(), Log: quiet, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	return lim
}

// A page of auditEvents whose filter matches nothing read the workspace's
// whole log in one statement (about 40 ms for 300,000 events) for the price
// of a page (2 points with first: 1). A page now looks at no more than
// store.AuditScanLimit events past its cursor and is charged a point for every
// 1,000 it looked at; one that found too few answers short with hasNextPage
// and a cursor past what it looked at, and following the cursors finds every
// match. An ordinary page costs what it did.
func TestAuditEventsScanIsBoundedAndCharged(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = dayLimiter(t, 0) })
	scanEvents(t, e, e.ws, e.owner.ID, "task.created", 25000)
	const q = `query($ws: ID!, $f: AuditEventFilter, $after: String) {
		auditEvents(workspaceId: $ws, filter: $f, first: 1, after: $after) { nodes { entityId } pageInfo { hasNextPage endCursor } } }`
	type page struct {
		Data struct {
			AuditEvents struct {
				Nodes    []struct{ EntityID string }
				PageInfo struct {
					HasNextPage bool
					EndCursor   *string
				}
			}
		}
	}
	read := func(f map[string]any, after *string) (page, float64) {
		t.Helper()
		r := e.Post(t, e.owner.Token, q, map[string]any{"ws": e.ws, "f": f, "after": after})
		var p page
		if r.Code() != "" || json.Unmarshal(r.Raw, &p) != nil {
			t.Fatalf("page: %s", r.Raw)
		}
		return p, actualCost(t, r)
	}
	// An ordinary page: the price of first: 1 with nodes and pageInfo, nothing more.
	if _, c := read(nil, nil); c != 3 {
		t.Fatalf("an unfiltered page of 1 took %v points, want 3", c)
	}
	if _, c := read(map[string]any{"entityType": "task", "entityId": scanEntity(24000)}, nil); c != 3 {
		t.Fatalf("a page of one task's history took %v points, want 3", c)
	}
	// entityId alone (no entityType) is no index's prefix: the workspace's
	// events are looked at. The first is the oldest of 25,000.
	var pages, spent int
	var found []string
	var after *string
	for {
		p, c := read(map[string]any{"entityId": scanEntity(1)}, after)
		pages++
		spent += int(c)
		for _, n := range p.Data.AuditEvents.Nodes {
			found = append(found, n.EntityID)
		}
		if !p.Data.AuditEvents.PageInfo.HasNextPage {
			break
		}
		if p.Data.AuditEvents.PageInfo.EndCursor == nil || pages > 10 {
			t.Fatalf("page %d: hasNextPage without a cursor, or too many pages", pages)
		}
		after = p.Data.AuditEvents.PageInfo.EndCursor
	}
	if len(found) != 1 || found[0] != scanEntity(1) {
		t.Fatalf("found %v, want [%s]", found, scanEntity(1))
	}
	// 25,000 events looked at in pages of at most 10,000: three pages, 25
	// points for the looking and 3 each for the pages.
	if pages != 3 || spent != 3*3+25 {
		t.Fatalf("a filter matching the oldest of 25,000 events took %d pages and %d points, want 3 and %d", pages, spent, 3*3+25)
	}
}

// A subscription resumed with an old cursor catches up by reading the
// spine from it; with a filter that matches nothing it read the whole log
// past the cursor for the subscription's price. Its catch-up now reads at
// most store.MaxSpineScan events a statement and is charged a point for
// every 1,000 events it looked at.
func TestSubscriptionCatchUpIsCharged(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, func(o *httpapi.Options) { o.Limiter = dayLimiter(t, 0) })
	cursor := e.data(t, e.admin, `{ changesCursor }`, nil, "changesCursor").(string)
	scanEvents(t, e, e.ws, e.owner.ID, "project.updated", 25000)
	// The events are read from the spine once every transaction begun
	// before theirs ended (the horizon is the cluster's): wait for it, so
	// that the catch-up reads them rather than the tailer.
	awaitHorizonPast(t, e.DB.Pool, "project.updated")
	s := e.OpenSSE(t, e.admin.Token, `subscription($ws: ID!, $after: String) {
		auditEventAdded(workspaceId: $ws, filter: {actions: ["task.*"]}, after: $after) { cursor } }`,
		map[string]any{"ws": e.ws, "after": cursor})
	e.waitSubscribed(t, 1)
	e.createTask(t, "after the catch-up")
	if ev, ok := s.Next(); !ok || ev.Event != "next" || containsCode(ev.Data, "RATE_LIMITED") {
		t.Fatalf("no event after the catch-up: %+v", ev)
	}
	r := e.Post(t, e.admin.Token, cheap, nil)
	// 1 for changesCursor, 10 to subscribe, 1 for the event, 1 for this
	// query (the task was created by the owner): 13, and 25 for the 25,000
	// events the catch-up looked at.
	if left, _ := rateLimitHeader(t, r); left != 1000-13-25 {
		t.Fatalf("%d left after a catch-up over 25,000 events, want %d", left, 1000-13-25)
	}
}

// awaitHorizonPast waits until every transaction that wrote an event of
// action has ended (the spine's horizon, the cluster's, is past it), so that
// a subscription's catch-up reads those events rather than its tailer.
func awaitHorizonPast(t *testing.T, pool *pgxpool.Pool, action string) {
	t.Helper()
	var tx string
	if err := pool.QueryRow(t.Context(), `SELECT max(tx_id)::text FROM audit_events WHERE action = $1`, action).Scan(&tx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the horizon past the transactions of "+action, func() bool {
		var passed bool
		if err := pool.QueryRow(t.Context(), `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, tx).Scan(&passed); err != nil {
			t.Fatal(err)
		}
		return passed
	})
}
