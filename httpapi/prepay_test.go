package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// countedEnv is an API on a pool that counts the statements sql matches,
// batched ones too, with dayLimiter's budget of 1,000 points a day and
// MAX_QUERY_COST maxCost (0: its default).
func countedEnv(t *testing.T, maxCost int, match func(sql string) bool) (*apitest.Env, *storetest.Statements, *ratelimit.Limiter) {
	t.Helper()
	n := &storetest.Statements{Match: match, Batches: true}
	lim := dayLimiter(t, maxCost)
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = n }), nil)
	return apitest.NewOn(t, db, func(o *httpapi.Options) { o.Limiter = lim }), n, lim
}

// pageScan matches the statement of a page of audit events that looks past
// what it keeps (its window), the scan a page's worst case pays for.
func pageScan(sql string) bool { return strings.Contains(sql, "row_number() OVER w") }

// catchUpRead matches a subscription's catch-up read (a pageScan up to the
// horizon).
func catchUpRead(sql string) bool { return pageScan(sql) && strings.Contains(sql, "horizon") }

// scannedWorkspace is an auditEnv on env whose owner's workspace holds
// events task.created events (scanEvents), for the scans' tests.
func scannedWorkspace(t *testing.T, env *apitest.Env, events int) *auditEnv {
	t.Helper()
	e := &auditEnv{Env: env}
	e.owner = e.NewUser(t, "Owner")
	e.ws = e.workspace(t, map[apitest.User]store.Role{e.owner: store.RoleOwner})
	scanEvents(t, e, e.ws, e.owner.ID, "task.created", events)
	return e
}

// newAdmin is a new user, made an ADMIN of e's workspace ws by SQL.
func newAdmin(t *testing.T, e interface {
	NewUser(t testing.TB, name string) apitest.User
	exec(t *testing.T, sql string, args ...any)
}, ws string) apitest.User {
	t.Helper()
	u := e.NewUser(t, "Admin")
	e.exec(t, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'ADMIN')`, ws, u.ID)
	return u
}

// leave spends u's budget until points are left (left's own query included).
func leave(t *testing.T, env *apitest.Env, lim *ratelimit.Limiter, u apitest.User, points int) {
	t.Helper()
	now := left(t, env, u)
	if now < points {
		t.Fatalf("%d points left, fewer than %d", now, points)
	}
	if o := lim.Charge(t.Context(), u.ID, int64(now-points)); o.Limited != "" {
		t.Fatalf("spending %d of %d points: refused", now-points, now)
	}
}

// expectRefused fails unless r is the 429 of an operation refused as a
// whole while it ran: Retry-After, and RATE_LIMITED errors with retryAfter
// (at least Retry-After's), no data.
func expectRefused(t *testing.T, what string, r *apitest.Response) {
	t.Helper()
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || err != nil || retry < 1 {
		t.Fatalf("%s: %d, Retry-After %q: %s; want 429", what, r.Status, r.Header.Get("Retry-After"), r.Raw)
	}
	var body struct {
		Data   json.RawMessage
		Errors []struct{ Extensions map[string]any }
	}
	if err := json.Unmarshal(r.Raw, &body); err != nil || len(body.Data) != 0 || len(body.Errors) == 0 {
		t.Fatalf("%s: %s", what, r.Raw)
	}
	for _, e := range body.Errors {
		if n, _ := e.Extensions["retryAfter"].(float64); e.Extensions["code"] != "RATE_LIMITED" || int(n) > retry {
			t.Fatalf("%s: %s", what, r.Raw)
		}
	}
}

// A page of auditEvents whose filter no index serves whole looks at up to
// 10,000 events, 10 points, charged once they were looked at: a caller
// whose budget could not pay them still had them looked at, and only then
// was refused. The page is now refused (429 RATE_LIMITED with Retry-After)
// before its statement runs unless the budget can pay its worst case; with
// enough budget it is charged what it looked at, not the worst case. A page
// its index serves whole (at most first+1 events) needs nothing more.
func TestAuditScanIsRefusedBeforeItRuns(t *testing.T) {
	t.Parallel()
	env, scans, lim := countedEnv(t, 0, pageScan)
	e := scannedWorkspace(t, env, 25000)
	const q = `query($ws: ID!, $f: AuditEventFilter) {
		auditEvents(workspaceId: $ws, filter: $f, first: 1) { nodes { entityId } pageInfo { hasNextPage } } }` // price 3
	// Each case reads as an admin of its own, whose budget it sets.
	var u apitest.User
	admin := func(points int) {
		t.Helper()
		u = newAdmin(t, e, e.ws)
		leave(t, env, lim, u, points)
	}
	page := func(f map[string]any) *apitest.Response {
		t.Helper()
		return e.Post(t, u.Token, q, map[string]any{"ws": e.ws, "f": f})
	}
	none := map[string]any{"actions": []string{"comment.*"}} // looks at 10,000 events, keeps none
	every := map[string]any{"actions": []string{"task.*"}}   // fills its page at the second event

	// The page's price and 9 points: one less than its scan may cost.
	admin(3 + 9)
	before := scans.Count()
	r := page(none)
	expectRefused(t, "a scan the budget cannot pay", r)
	if ran := scans.Count() - before; ran != 0 {
		t.Fatalf("a scan the budget cannot pay: %d scans ran, want none", ran)
	}
	if l, _ := rateLimitHeader(t, r); l != 9 {
		t.Fatalf("after a refused scan %d points are left, want 9 (the page's price taken)", l)
	}
	// Also when it would have cost nothing more: what a scan looks at is
	// known only once it ran.
	if r := page(every); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a scan with 6 points left: %d %s", r.Status, r.Raw)
	}
	// A page its index serves whole needs only its price.
	admin(3)
	if r := page(nil); r.Status != http.StatusOK || r.Code() != "" || actualCost(t, r) != 3 {
		t.Fatalf("an unfiltered page with 3 points left: %d %s", r.Status, r.Raw)
	}

	// Enough for the worst case: the page, charged what it looked at.
	admin(3 + 10)
	before = scans.Count()
	r = page(none)
	var p struct {
		Data struct {
			AuditEvents struct {
				Nodes    []struct{ EntityID string }
				PageInfo struct{ HasNextPage bool }
			}
		}
	}
	if r.Status != http.StatusOK || r.Code() != "" || json.Unmarshal(r.Raw, &p) != nil || !p.Data.AuditEvents.PageInfo.HasNextPage {
		t.Fatalf("a scan the budget can pay: %d %s", r.Status, r.Raw)
	}
	if c := actualCost(t, r); c != 3+10 || scans.Count()-before != 1 {
		t.Fatalf("a scan of 10,000 events cost %v points in %d statements, want 13 in 1", c, scans.Count()-before)
	}
	admin(3 + 10)
	if r := page(every); r.Status != http.StatusOK || r.Code() != "" || actualCost(t, r) != 3 {
		t.Fatalf("a scan of 2 events with 13 points left: %d %s, want its price 3", r.Status, r.Raw)
	}
}

// A search ranks every task matching its query, a point for every 1,000,
// charged once they were ranked: a caller whose budget was spent had a
// whole workspace ranked before it was refused. No cheap bound is known
// before a search (any task of the workspace may match), so a search in a
// workspace of store.SearchCountFrom tasks or more is now refused before
// its statement runs when the budget cannot pay the first point of the
// ranking; with a point left it runs, charged what it ranked.
func TestSpentSearchIsRefusedBeforeItRuns(t *testing.T) {
	t.Parallel()
	env, searches, lim := countedEnv(t, 0, func(sql string) bool { return strings.Contains(sql, "ts_rank(") })
	e := liveEnvOn(t, env)
	e.exec(t, `INSERT INTO tasks (project_id, workspace_id, title, created_by)
		SELECT $1, $2, CASE WHEN i <= 5 THEN 'invoice ' ELSE 'deploy ' END || i, $3
		FROM generate_series(1, 5005) i`, e.project, e.ws, e.owner.ID)
	const q = `query($ws: ID!, $q: String!) { searchTasks(workspaceId: $ws, query: $q, first: 20) { nodes { id } } }` // price 21
	search := func(u apitest.User, query string) *apitest.Response {
		t.Helper()
		return e.Post(t, u.Token, q, map[string]any{"ws": e.ws, "q": query})
	}
	leave(t, env, lim, e.member, 21)
	before := searches.Count()
	r := search(e.member, "deploy")
	expectRefused(t, "a search with a spent budget", r)
	if ran := searches.Count() - before; ran != 0 {
		t.Fatalf("a search with a spent budget: %d searches ran, want none", ran)
	}
	leave(t, env, lim, e.admin, 21+1)
	if r := search(e.admin, "invoice"); r.Status != http.StatusOK || r.Code() != "" || actualCost(t, r) != 21 || searches.Count()-before != 1 {
		t.Fatalf("a search of 5 matches with a point left: %d %s in %d statements, want its price 21 in 1",
			r.Status, r.Raw, searches.Count()-before)
	}
}

// A subscription's catch-up read looks at up to live.CatchUpScan events of
// the spine, 10 points, charged once read: a caller whose budget could not
// pay them still had them read, and only then was its stream ended. The
// stream now ends with RATE_LIMITED (and the cursor to resume from) before
// the read when the budget cannot pay its worst case; with enough budget
// the catch-up runs, charged what it looked at.
func TestCatchUpIsRefusedBeforeItReads(t *testing.T) {
	t.Parallel()
	env, reads, lim := countedEnv(t, 0, catchUpRead)
	e := liveEnvOn(t, env)
	cursor := e.data(t, e.owner, `{ changesCursor }`, nil, "changesCursor").(string)
	scanEvents(t, e, e.ws, e.owner.ID, "project.updated", 12000)
	// Read by the catch-up, not the tailer: once every transaction begun
	// before theirs ended.
	awaitHorizonPast(t, e.DB.Pool, "project.updated")
	const sub = `subscription($ws: ID!, $after: String) {
		auditEventAdded(workspaceId: $ws, filter: {actions: ["task.*"]}, after: $after) { cursor } }` // price 10
	vars := map[string]any{"ws": e.ws, "after": cursor}

	leave(t, env, lim, e.admin, 10+9)
	before := reads.Count()
	s := e.OpenSSE(t, e.admin.Token, sub, vars)
	ev, ok := s.Next()
	if !ok || !containsCode(ev.Data, "RATE_LIMITED") || !strings.Contains(ev.Data, "retryAfter") || !strings.Contains(ev.Data, "cursor") {
		t.Fatalf("a catch-up the budget cannot pay: %+v, want RATE_LIMITED with retryAfter and cursor", ev)
	}
	if ran := reads.Count() - before; ran != 0 {
		t.Fatalf("a catch-up the budget cannot pay: %d reads ran, want none", ran)
	}

	// 10 for the subscription, 10 and 2 for 12,000 events looked at, 1 for
	// the event, and 9 besides: the second read, of 2,000 events, may cost
	// up to 10 too.
	u := newAdmin(t, e, e.ws)
	leave(t, env, lim, u, 10+10+2+1+9)
	before = reads.Count()
	s = e.OpenSSE(t, u.Token, sub, vars)
	e.waitSubscribed(t, 1)
	e.createTask(t, "after the catch-up")
	if ev, ok := s.Next(); !ok || ev.Event != "next" || containsCode(ev.Data, "RATE_LIMITED") {
		t.Fatalf("no event after a catch-up the budget could pay: %+v", ev)
	}
	if n := reads.Count() - before; n != 2 {
		t.Fatalf("%d catch-up reads, want 2 (10,000 events and 2,000)", n)
	}
	if l := left(t, env, u); l != 9-1 {
		t.Fatalf("%d points left after the catch-up, want 8: charged what it looked at", l)
	}
}

// A subscription's catch-up read may look at live.CatchUpScan events, 10
// points beyond the subscription's price, and was checked against the
// budget only: with MAX_QUERY_COST 20, a subscription priced 11 read the
// log from its cursor, up to 21 points in the operation. Every
// subscription makes such a read when it starts, so it is now refused when
// it subscribes, QUERY_TOO_COSTLY with cost 21 and maximum 20, charged
// nothing and reading nothing (for a while on 2026-12-05 it was charged its
// price, then ended at its first read); one priced 10 catches up.
func TestCatchUpOverMaxQueryCostIsRefusedBeforeItReads(t *testing.T) {
	t.Parallel()
	env, reads, _ := countedEnv(t, 20, catchUpRead)
	e := liveEnvOn(t, env)
	cursor := e.data(t, e.admin, `{ changesCursor }`, nil, "changesCursor").(string)
	vars := map[string]any{"ws": e.ws, "after": cursor}

	before, had := reads.Count(), left(t, e.Env, e.admin)
	s := e.OpenSSE(t, e.admin.Token, `subscription($ws: ID!, $after: String) {
		auditEventAdded(workspaceId: $ws, after: $after) { cursor event { id } } }`, vars) // price 11
	body, _ := io.ReadAll(s.Res.Body)
	var refused struct {
		Errors []struct{ Extensions map[string]any }
	}
	_ = json.Unmarshal(body, &refused)
	if s.Res.StatusCode == http.StatusOK || len(refused.Errors) != 1 || refused.Errors[0].Extensions["code"] != "QUERY_TOO_COSTLY" ||
		refused.Errors[0].Extensions["cost"] != 21.0 || refused.Errors[0].Extensions["maximum"] != 20.0 {
		t.Fatalf("a subscription whose catch-up's worst case takes it over MAX_QUERY_COST: %d %s, "+
			"want QUERY_TOO_COSTLY with cost 21 and maximum 20 when it subscribes", s.Res.StatusCode, body)
	}
	if ran := reads.Count() - before; ran != 0 {
		t.Fatalf("a subscription over MAX_QUERY_COST with its catch-up: %d reads ran, want none", ran)
	}
	// The query that reads the budget (1): the subscription was charged
	// nothing (it was its price, 11, and then ended at its first read).
	if l := left(t, e.Env, e.admin); had-l != 1 {
		t.Fatalf("%d points spent, want 1: nothing for the refused subscription", had-l)
	}

	// Priced 10, its worst case keeps it at MAX_QUERY_COST: it catches up
	// (a task's event past the cursor).
	e.createTask(t, "caught up")
	s = e.OpenSSE(t, e.admin.Token, `subscription($ws: ID!, $after: String) {
		auditEventAdded(workspaceId: $ws, after: $after) { cursor } }`, vars)
	if ev, ok := s.Next(); !ok || ev.Event != "next" || strings.Contains(ev.Data, `"errors"`) {
		t.Fatalf("a catch-up within MAX_QUERY_COST: %+v, want the task's event", ev)
	}
}

// An export's page whose filter no index serves whole looks at up to
// 10,000 events, charged once read (waited for, as a page's points are):
// the page was read when its budget could pay its 100 points, whatever it
// then looked at. The first page is now refused (429) before its statement
// runs unless the budget can pay its points and all it may look at; an
// export that can is charged what it looked at.
func TestExportScanIsRefusedBeforeItRuns(t *testing.T) {
	t.Parallel()
	env, scans, lim := countedEnv(t, 0, pageScan)
	e := scannedWorkspace(t, env, 9000)
	path := "/audit/export?workspaceId=" + e.ws + "&actions=comment.*"

	// 1 for the request, 100 for the page and 9: one less than its scan may cost.
	leave(t, env, lim, e.owner, 1+100+9)
	r := send(t, env, http.MethodGet, path, e.owner.Token)
	expectRateLimited(t, "an export's scan the budget cannot pay", r)
	if ran := scans.Count(); ran != 0 {
		t.Fatalf("an export's scan the budget cannot pay: %d scans ran, want none", ran)
	}
	u := newAdmin(t, e, e.ws)
	leave(t, env, lim, u, 1+100+10)
	if r := send(t, env, http.MethodGet, path, u.Token); r.Status != http.StatusOK || len(r.Raw) != 0 || scans.Count() != 1 {
		t.Fatalf("an export the budget can pay: %d %.200q in %d scans", r.Status, r.Raw, scans.Count())
	}
	// 9,000 events looked at: 9 points, not 10.
	if l := left(t, env, u); l != 1-1 {
		t.Fatalf("%d points left after an export of 1+100+9 points, want 0", l)
	}
}

// Aliases of a page of auditEvents resolve at once, and each asked whether
// the budget could pay its worst case before its scan: all saw the same
// budget, so 5 aliases each passed a check only one of them could pay, and
// all 5 scans ran. What a check lets through is now held against the budget
// until the page is charged what it looked at (or fails): with a budget
// that pays the operation and one worst case, exactly one scan runs.
func TestAliasedScansReserveTheirWorstCase(t *testing.T) {
	t.Parallel()
	env, scans, lim := countedEnv(t, 0, pageScan)
	e := scannedWorkspace(t, env, 12000)
	var q strings.Builder
	q.WriteString(`query($ws: ID!) {`)
	for i := range 5 {
		// Each looks at 10,000 events and keeps none: price 2, up to 10 more.
		fmt.Fprintf(&q, ` a%d: auditEvents(workspaceId: $ws, filter: {actions: ["comment.*"]}, first: 1) { nodes { id } }`, i)
	}
	q.WriteString(` }`)
	leave(t, env, lim, e.owner, 5*2+10)
	before := scans.Count()
	r := e.Post(t, e.owner.Token, q.String(), map[string]any{"ws": e.ws})
	if ran := scans.Count() - before; ran != 1 {
		t.Fatalf("5 aliased scans with a budget for one: %d scans ran, want 1: %d %s", ran, r.Status, r.Raw)
	}
	if l := lim.Afford(t.Context(), e.owner.ID, 0).Budget.Remaining; l != 0 {
		t.Errorf("%d points left, want 0: the operation's 10 and the one scan's 10 taken", l)
	}
	var refused int
	for _, err := range r.Body.Errors {
		if ext, _ := err["extensions"].(map[string]any); ext["code"] == "RATE_LIMITED" {
			refused++
		}
	}
	if refused != 4 {
		t.Errorf("%d aliases refused RATE_LIMITED, want 4: %s", refused, r.Raw)
	}
}

// A page of auditEvents whose price and worst case together are more than
// MAX_QUERY_COST was read, and refused only once charged what it looked at.
// It is now refused before it reads (QUERY_TOO_COSTLY, nothing more taken),
// as an overrun is; a page within it runs, and the worst cases of aliases
// in flight count together.
func TestScanOverMaxQueryCostIsRefusedBeforeItRuns(t *testing.T) {
	t.Parallel()
	env, n, lim := countedEnv(t, 16, pageScan)
	e := scannedWorkspace(t, env, 12000)
	page := `a: auditEvents(workspaceId: $ws, filter: {actions: ["comment.*"]}, first: 1) { nodes { id } }`
	budget := func() int { return lim.Afford(t.Context(), e.owner.ID, 0).Budget.Remaining }

	// A page costs 2 and may look at 10 more; the cheap page costs 3.
	for _, c := range []struct {
		name, query string
		scans       int64
		codes       []string
	}{
		{"a page and a cheap page, 2+3+10", `query($ws: ID!) { ` + page + ` t: auditEvents(workspaceId: $ws, first: 2) { nodes { id } } }`, 1, nil},
		{"two pages, 4+10+10", `query($ws: ID!) { ` + page + ` ` + strings.Replace(page, "a:", "b:", 1) + ` }`, 1, []string{"QUERY_TOO_COSTLY"}},
	} {
		before, left := n.Count(), budget()
		r := e.Post(t, e.owner.Token, c.query, map[string]any{"ws": e.ws})
		var codes []string
		for _, err := range r.Body.Errors {
			ext, _ := err["extensions"].(map[string]any)
			code, _ := ext["code"].(string)
			codes = append(codes, code)
		}
		if ran := n.Count() - before; ran != c.scans || !slices.Equal(codes, c.codes) {
			t.Errorf("%s: %d scans, errors %v; want %d, %v: %s", c.name, ran, codes, c.scans, c.codes, r.Raw)
		}
		if spent := left - budget(); spent > 16 {
			t.Errorf("%s: %d points taken, more than MAX_QUERY_COST", c.name, spent)
		}
	}
}
