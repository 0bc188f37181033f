package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"taskflow/store"
	"taskflow/store/storetest"
)

// searchWorkspace makes a workspace of n tasks with a member and returns them:
// every task has "deploy" in its title or description, once or more (so their
// ranks differ), and every seventh has "invoice".
func searchWorkspace(t *testing.T, db *store.DB, name string, n int) (ws string, member *store.User) {
	t.Helper()
	ctx := context.Background()
	member = mkUser(t, db, name+"@example.com")
	w, err := db.CreateWorkspace(ctx, member, name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, member, w.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO tasks (project_id, workspace_id, title, description, created_by, created_at)
		SELECT $1, $2,
			CASE WHEN i % 3 = 0 THEN 'deploy the ' ELSE 'ship the ' END || CASE WHEN i % 7 = 0 THEN 'invoice ' ELSE '' END || 'service ' || i,
			repeat('deploy ', i % 4) || 'notes of task ' || i,
			$3, '2026-01-01'::timestamptz + make_interval(secs => i / 2)
		FROM generate_series(1, $4::int) i`, p.ID, w.ID, member.ID, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	return w.ID, member
}

// TestSearchLooksAtItsMatchesOnce: in a workspace of SearchCountFrom tasks or
// more, a search page both ranks the matches and counts them (for its charge).
// It did so by two looks through the tasks, each testing every task of the
// workspace against the query (the page's, and a count's); the count now
// comes from the page's own look. Each look is a scan of tasks filtered by
// the query (@@) in the statement's plan.
func TestSearchLooksAtItsMatchesOnce(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	ws, member := searchWorkspace(t, db, "big", store.SearchCountFrom+200)
	for _, query := range []string{"deploy", "invoice", "nothing-matches-this"} {
		var plan []map[string]any
		var raw []byte
		if err := db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+store.SearchSQL(true),
			ws, query, nil, nil, nil, 21, member.ID).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &plan); err != nil {
			t.Fatal(err)
		}
		var looks []string
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if n["Relation Name"] == "tasks" {
				for _, k := range []string{"Filter", "Recheck Cond", "Index Cond"} {
					if c, _ := n[k].(string); strings.Contains(c, "@@") {
						looks = append(looks, fmt.Sprintf("%s (%s: %s)", n["Node Type"], k, c))
						break
					}
				}
			}
			children, _ := n["Plans"].([]any)
			for _, c := range children {
				walk(c.(map[string]any))
			}
		}
		for _, p := range plan {
			walk(p["Plan"].(map[string]any))
		}
		if len(looks) != 1 {
			t.Errorf("%q: the statement looks through the tasks for the matches %d times, want once: %s", query, len(looks), strings.Join(looks, "; "))
		}
	}
}

// TestSearchPagesAreTheMatchesInOrder pages through searches in a workspace
// of SearchCountFrom tasks or more (each page counts the matches) and in a
// small one (searched first as a workspace of unknown size, then as one
// remembered small): the pages together are the matching tasks, each once,
// best first (ts_rank, then newest), as one query of every match orders
// them; each page of the big workspace tells every match, the small one's
// none (nothing to charge).
func TestSearchPagesAreTheMatchesInOrder(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	big, bigMember := searchWorkspace(t, db, "big", store.SearchCountFrom+200)
	small, smallMember := searchWorkspace(t, db, "small", 60)
	for _, c := range []struct {
		ws     string
		member *store.User
		first  int
		counts bool
	}{{big, bigMember, 100, true}, {small, smallMember, 7, false}, {small, smallMember, 7, false}} {
		for _, query := range []string{"deploy", "invoice", "deploy -invoice", "ship OR invoice", "nothing-matches-this"} {
			rows, err := db.Pool.Query(ctx, `SELECT id FROM tasks, websearch_to_tsquery('english', $2) AS q(q)
				WHERE workspace_id = $1 AND search @@ q.q
				ORDER BY ts_rank(search, q.q) DESC, created_at DESC, id DESC`, c.ws, query)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				want = append(want, id)
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			if query == "deploy" && len(want) < 40 {
				t.Fatalf("%d tasks match %q", len(want), query)
			}
			wantMatched := 0
			if c.counts {
				wantMatched = len(want)
			}
			var got []string
			var after *string
			for page := 0; ; page++ {
				matched := -1
				conn, err := db.SearchTasks(ctx, c.member, c.ws, query, &c.first, after, store.ListedTaskFields, nil,
					func(n int) error { matched = n; return nil })
				if err != nil {
					t.Fatal(err)
				}
				if matched != wantMatched {
					t.Errorf("%q, page %d: matched %d, want %d", query, page, matched, wantMatched)
				}
				for _, e := range conn.Edges {
					got = append(got, e.Node.ID)
				}
				if !conn.PageInfo.HasNextPage {
					break
				}
				after = conn.PageInfo.EndCursor()
			}
			if !slices.Equal(got, want) {
				t.Errorf("%q in a workspace of %d-task pages: %d tasks, want the %d matches in order", query, c.first, len(got), len(want))
			}
		}
	}
}
