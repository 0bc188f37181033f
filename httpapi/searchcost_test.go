package httpapi_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"testing"

	"taskflow/httpapi"
)

// A search ranks every task of the workspace it matches before it pages, and
// was charged its price whatever that number: a word in 100,000 tasks took
// 60 ms of Postgres a page for 21 points. A page is now charged a point more
// for every whole 1,000 tasks it ranked, also when it is empty (a cursor
// past every match ranks them all too); a search matching fewer costs what
// it did.
func TestSearchIsChargedByMatches(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, func(o *httpapi.Options) { o.Limiter = dayLimiter(t, 0) })
	e.exec(t, `INSERT INTO tasks (project_id, workspace_id, title, created_by)
		SELECT $1, $2, CASE WHEN i <= 5 THEN 'invoice ' ELSE 'deploy ' END || i, $3
		FROM generate_series(1, 5005) i`, e.project, e.ws, e.owner.ID)
	const q = `query($ws: ID!, $q: String!, $after: String) {
		searchTasks(workspaceId: $ws, query: $q, first: 20, after: $after) { nodes { id } pageInfo { hasNextPage } } }`
	search := func(query string, after *string) (int, float64) {
		t.Helper()
		r := e.Post(t, e.member.Token, q, map[string]any{"ws": e.ws, "q": query, "after": after})
		var out struct {
			Data struct {
				SearchTasks struct{ Nodes []struct{ ID string } }
			}
		}
		if r.Code() != "" || json.Unmarshal(r.Raw, &out) != nil {
			t.Fatalf("search %q: %s", query, r.Raw)
		}
		return len(out.Data.SearchTasks.Nodes), actualCost(t, r)
	}
	n, price := search("invoice", nil)
	if n != 5 || price != 41 { // its price, as before
		t.Fatalf("a search matching 5 tasks: %d tasks for %v points, want 5 for 41", n, price)
	}
	if n, c := search("deploy", nil); n != 20 || c != price+5 {
		t.Fatalf("a search matching 5,000 tasks: %d tasks for %v points, want 20 for %v", n, c, price+5)
	}
	// A cursor past every match: an empty page, every match ranked.
	sum := sha256.Sum256([]byte("deploy"))
	cur, _ := json.Marshal(map[string]any{"r": -1, "t": "2000-01-01T00:00:00Z", "i": "00000000-0000-0000-0000-000000000001",
		"s": "search:" + e.ws + ":" + hex.EncodeToString(sum[:12])})
	after := base64.RawURLEncoding.EncodeToString(cur)
	if n, c := search("deploy", &after); n != 0 || c != price+5 {
		t.Fatalf("a search past its 5,000 matches: %d tasks for %v points, want 0 for %v", n, c, price+5)
	}
}
