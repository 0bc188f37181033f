package scaleout_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// budgetEnv are the settings checkBudgetsShared expects: a cost budget of 300
// points that does not refill during the test, and 127.0.0.1 as a trusted proxy
// so that each check has a client IP of its own.
var budgetEnv = []string{"RATE_LIMIT_POINTS=300", "RATE_LIMIT_WINDOW=1000h", "TRUSTED_PROXIES=127.0.0.1/32"}

// costLeft reads r of the RateLimit header.
func costLeft(t testing.TB, r *response) int {
	t.Helper()
	h := r.Header.Get("RateLimit")
	for _, part := range strings.Split(h, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "r="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				break
			}
			return n
		}
	}
	t.Fatalf("RateLimit header %q", h)
	return 0
}

// limited checks r is the contract's 429.
func limited(r *response, err error) bool {
	return err == nil && r.Status == http.StatusTooManyRequests && r.code() == "RATE_LIMITED" &&
		r.Header.Get("Retry-After") != "" && len(r.Body.Data) == 0
}

// checkBudgetsShared spends every kind of budget round-robin over the instances
// and checks that it runs out once for all of them: the query-cost budget of a
// user, login attempts per e-mail and per client IP, and searchTasks per user.
// With exact set the instances run with RATE_LIMIT_LEASE=0 and every response
// must report exactly what is left; else they lease slices of the cost budget
// (the default), and the budget must still be spent exactly once.
func checkBudgetsShared(t *testing.T, ins []*instance, pool *pgxpool.Pool, exact bool) {
	t.Helper()
	if exact {
		checkCostExact(t, ins, pool)
	} else {
		checkCostLeased(t, ins, pool)
	}
	checkEndpointLimitsShared(t, ins, pool)
}

// tenPoints costs 10 points: aliases count every time.
const tenPoints = `{ a: me { id } b: me { id } c: me { id } d: me { id } e: me { id }
	f: me { id } g: me { id } h: me { id } i: me { id } j: me { id } }`

// checkCostExact spends a user's 300 points round-robin: each answer reports what
// all instances together left.
func checkCostExact(t *testing.T, ins []*instance, pool *pgxpool.Pool) {
	t.Helper()
	_, ann := newUser(t, pool, "ann")
	for k := 1; k <= 30; k++ {
		in := ins[k%len(ins)]
		r, err := in.post(ann, tenPoints, nil, "X-Forwarded-For", "10.1.0.1")
		if err != nil || r.Status != 200 || r.code() != "" {
			t.Fatalf("cost query %d on %s: %v %v", k, in.addr, err, r)
		}
		if left := costLeft(t, r); left != 300-10*k {
			t.Fatalf("cost query %d on %s leaves %d points, want %d: the budget is not shared", k, in.addr, left, 300-10*k)
		}
	}
	for _, in := range ins {
		if r, err := in.post(ann, tenPoints, nil); !limited(r, err) {
			t.Fatalf("spent budget on %s: %v %v", in.addr, err, r)
		}
	}
}

// checkCostLeased spends a user's 300 points round-robin over instances that
// lease slices of it: until every instance refuses, exactly 30 ten-point
// queries run in all (never more: leased points are charged in Redis first;
// never fewer: an instance spends its lease before it is refused and gives back
// what it cannot spend), and once the leases' period is over every instance
// reports the budget spent.
func checkCostLeased(t *testing.T, ins []*instance, pool *pgxpool.Pool) {
	t.Helper()
	_, ann := newUser(t, pool, "ann")
	allowed, refusedInARow := 0, 0
	for k := 0; refusedInARow < 2*len(ins); k++ {
		if k > 200 {
			t.Fatalf("%d queries run and still no refusal on every instance", allowed)
		}
		in := ins[k%len(ins)]
		r, err := in.post(ann, tenPoints, nil, "X-Forwarded-For", "10.1.0.1")
		switch {
		case err == nil && r.Status == 200 && r.code() == "":
			allowed++
			refusedInARow = 0
			if left := costLeft(t, r); left < 0 || left > 290 {
				t.Fatalf("query %d on %s reports %d points left", allowed, in.addr, left)
			}
		case limited(r, err):
			refusedInARow++
		default:
			t.Fatalf("cost query %d on %s: %v %v", k, in.addr, err, r)
		}
	}
	if allowed != 30 {
		t.Fatalf("%d ten-point queries ran on a budget of 300 points", allowed)
	}
	for _, in := range ins {
		eventually(t, "every instance reports the budget spent", func() bool {
			// A query that fails validation is not charged and reports the budget.
			r, err := in.post(ann, `{ nope }`, nil, "X-Forwarded-For", "10.1.0.1")
			return err == nil && r.Status == 200 && r.code() == "GRAPHQL_VALIDATION_FAILED" && costLeft(t, r) == 0
		})
		if r, err := in.post(ann, tenPoints, nil); !limited(r, err) {
			t.Fatalf("spent budget on %s: %v %v", in.addr, err, r)
		}
	}
}

// pacedTurn reports whether r is the refusal of a caller whose turns are
// paced (docs/api.md, "your turn"), not of the limit a check spends.
func pacedTurn(r *response) bool {
	if r.Status != http.StatusTooManyRequests || len(r.Body.Errors) == 0 {
		return false
	}
	msg, _ := r.Body.Errors[0]["message"].(string)
	return strings.Contains(msg, "took too much of this server's time to prepare")
}

// postPaced posts like in.post and, while the answer is the pace of the
// caller's turns, waits its Retry-After and posts again, as a client would. A
// password hash is work of the caller's turn: on a loaded machine (the race
// detector, a CI run's other packages) ten logins from one client IP outrun
// the pace of a quarter of a core. That refusal comes before the request is
// read, so it spends no login attempt, and the limits checked here stay exact.
func postPaced(t *testing.T, in *instance, token, query string, vars map[string]any, headers ...string) (*response, error) {
	t.Helper()
	for range 20 {
		r, err := in.post(token, query, vars, headers...)
		if err != nil || !pacedTurn(r) {
			return r, err
		}
		wait, _ := strconv.Atoi(r.Header.Get("Retry-After"))
		t.Logf("%s paced the caller's turns: waiting %d s", in.addr, wait)
		time.Sleep(time.Duration(max(wait, 1)) * time.Second)
	}
	t.Fatalf("still paced after 20 waits on %s", in.addr)
	return nil, nil
}

// checkEndpointLimitsShared spends the login and searchTasks limits round-robin.
func checkEndpointLimitsShared(t *testing.T, ins []*instance, pool *pgxpool.Pool) {
	t.Helper()
	// Login per e-mail: 5 attempts, wherever they land.
	login := `mutation($e: String!) { login(email: $e, password: "wrong password") { token } }`
	for k := range 5 {
		in := ins[k%len(ins)]
		r, err := postPaced(t, in, "", login, map[string]any{"e": "victim@example.com"}, "X-Forwarded-For", fmt.Sprintf("10.2.0.%d", k))
		if err != nil || r.code() != "UNAUTHENTICATED" {
			t.Fatalf("login attempt %d on %s: %v %v", k, in.addr, err, r)
		}
	}
	for _, in := range ins {
		r, err := postPaced(t, in, "", login, map[string]any{"e": "victim@example.com"}, "X-Forwarded-For", "10.2.1.1")
		if !limited(r, err) {
			t.Fatalf("6th login attempt for one e-mail on %s: %v %v", in.addr, err, r)
		}
	}

	// Login per client IP: 10 attempts, each for another e-mail.
	for k := range 10 {
		in := ins[k%len(ins)]
		r, err := postPaced(t, in, "", login, map[string]any{"e": fmt.Sprintf("u%d@example.com", k)}, "X-Forwarded-For", "10.3.0.1")
		if err != nil || r.code() != "UNAUTHENTICATED" {
			t.Fatalf("login attempt %d on %s: %v %v", k, in.addr, err, r)
		}
	}
	for _, in := range ins {
		r, err := postPaced(t, in, "", login, map[string]any{"e": "fresh@example.com"}, "X-Forwarded-For", "10.3.0.1")
		if !limited(r, err) {
			t.Fatalf("11th login attempt from one IP on %s: %v %v", in.addr, err, r)
		}
	}

	// searchTasks: 60 per minute per user.
	_, bob := newUser(t, pool, "bob")
	w := ins[0].mustPost(t, bob, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)
	search := `query($w: ID!) { searchTasks(workspaceId: $w, query: "x", first: 1) { nodes { id } } }`
	vars := map[string]any{"w": w.field("createWorkspace")["id"]}
	// The limit refills one search a second: searching round-robin until
	// every instance refuses, at least 60 run and no more than 60 plus one
	// a second since the first (three budgets not shared would allow 180;
	// a slow machine takes more than a second for 60 requests).
	start := time.Now()
	allowed, refusedInARow := 0, 0
	for k := 0; refusedInARow < len(ins); k++ {
		if k > 300 {
			t.Fatalf("%d searches run and still no refusal on every instance", allowed)
		}
		in := ins[k%len(ins)]
		r, err := in.post(bob, search, vars, "X-Forwarded-For", "10.4.0.1")
		switch {
		case err == nil && r.code() == "":
			allowed++
			refusedInARow = 0
		case limited(r, err):
			refusedInARow++
		default:
			t.Fatalf("search %d on %s: %v %v", k, in.addr, err, r)
		}
	}
	if most := 60 + int(time.Since(start)/time.Second) + 1; allowed < 60 || allowed > most {
		t.Fatalf("%d searches ran on a limit of 60 a minute (at most %d in %s)", allowed, most, time.Since(start))
	}
	// Bob's cost budget is not spent: other queries still run.
	if r, err := ins[1].post(bob, `{ me { id } }`, nil); err != nil || r.code() != "" {
		t.Fatalf("bob after his searches: %v %v", err, r)
	}
}

// eventually polls cond until it holds (a readiness poll with a generous
// deadline, not a timing assertion).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}
