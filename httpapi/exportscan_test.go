package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"taskflow/httpapi"
	"taskflow/ratelimit"
)

// An export's page was one query with no bound: a filter that matched
// nothing read the workspace's whole log in its first page's statement, for
// 1 + 100 points. Each page now looks at no more than store.AuditScanLimit
// events, the next going on from the last one looked at, and the events
// looked at are charged as on auditEvents (a point for every whole 1,000);
// an export is never cut short, and an ordinary one costs what it did.
func TestExportScanIsBoundedAndCharged(t *testing.T) {
	t.Parallel()
	lim := budgetLimiter(t, ratelimit.Config{Points: 100000, Window: 1000 * time.Hour})
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	// 25,000 events, the i-th a second after 2026-05-01 with entity id
	// scanEntity(i); task.updated when i ends in 000 or 001 (50 of them,
	// among them 15001 and 15000, the last event the first page looks at
	// and the first the second page does), project.updated otherwise.
	e.exec(t, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid,
			CASE WHEN i % 1000 IN (0, 1) THEN 'task.updated' ELSE 'project.updated' END, 'task',
			('00000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid,
			'2026-05-01T00:00:00Z'::timestamptz + i * interval '1 second', '{}'::jsonb
		FROM generate_series(1, 25000) i`, e.ws, e.owner.ID)
	export := func(filter url.Values) (ids []string, cost int) {
		t.Helper()
		before := left(t, e.Env, e.admin)
		q := url.Values{"workspaceId": {e.ws}}
		for k, v := range filter {
			q[k] = v
		}
		r := send(t, e.Env, http.MethodGet, "/audit/export?"+q.Encode(), e.admin.Token)
		if r.Status != http.StatusOK {
			t.Fatalf("export %v: %d %.200q", filter, r.Status, r.Raw)
		}
		sc := bufio.NewScanner(bytes.NewReader(r.Raw))
		for sc.Scan() {
			var ev struct{ EntityID string }
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			ids = append(ids, ev.EntityID)
		}
		// left's own query costs 1.
		return ids, before - left(t, e.Env, e.admin) - 1
	}

	// A filter no index serves that matches nothing: three pages (10,000,
	// 10,000 and 5,000 events looked at), 1 + 3×100 + 25.
	if ids, cost := export(url.Values{"actions": {"comment.*"}}); len(ids) != 0 || cost != 1+3*100+25 {
		t.Fatalf("an export matching none of 25,000 events: %d events for %d points, want 0 for %d", len(ids), cost, 1+3*100+25)
	}

	// A sparse filter: every match once, in order, across the pages' bounds.
	ids, cost := export(url.Values{"actions": {"task.*"}})
	var want []string
	for i := 25000; i >= 1; i-- {
		if i%1000 == 0 || i%1000 == 1 {
			want = append(want, scanEntity(i))
		}
	}
	if len(ids) != len(want) {
		t.Fatalf("a sparse export gave %d events, want %d", len(ids), len(want))
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("a sparse export's event %d is %s, want %s", i, ids[i], want[i])
		}
	}
	if cost != 1+3*100+25 {
		t.Fatalf("a sparse export over 25,000 events took %d points, want %d", cost, 1+3*100+25)
	}

	// An ordinary export: 250 full pages of 101 events looked at, 100 each.
	if ids, cost := export(nil); len(ids) != 25000 || cost != 1+250*100 {
		t.Fatalf("an unfiltered export of 25,000 events: %d events for %d points, want 25000 for %d", len(ids), cost, 1+250*100)
	}
}
