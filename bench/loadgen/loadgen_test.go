package loadgen

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/bench/peer"
	"taskflow/store"
	"taskflow/store/storetest"
)

// TestHarnessSmoke runs every scenario with every contender (PostGraphile
// when bench/peer is installed: the test fetches nothing) and the off/on
// comparison for a handful of requests, so that the harness keeps working as
// the server changes. It asserts that everything ran without errors and that
// the CPU meters found their processes, not how fast (speed is what the
// harness itself reports).
func TestHarnessSmoke(t *testing.T) {
	t.Parallel()
	withPeer := peer.Installed("../peer")
	if !withPeer {
		t.Log("bench/peer is not installed (bench/peer/install.sh): the smoke test runs without PostGraphile")
	}
	rep, err := Run(t.Context(), Config{
		DatabaseURL: storetest.URL(t),
		RedisURL:    "redis://127.0.0.1:6379/0",
		Concurrency: 2, Requests: 6, Duration: 20 * time.Second, Warmup: 20 * time.Second,
		Users: 3, Tasks: 4, CommentsPerTask: 2,
		Compare: true, Replay: true, Peer: withPeer, PeerDir: "../peer", Seal: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(Scenarios) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(Scenarios))
	}
	for i, res := range rep.Results {
		if res.Unavailable != "" {
			t.Errorf("%s could not run: %s", res.Scenario, res.Unavailable)
			continue
		}
		want := []string{TaskFlow, RawSQL}
		if withPeer && Scenarios[i].peer != nil {
			want = append(want, PostGraphile)
		}
		if !Scenarios[i].PerWorker {
			want = append(want, Replay)
		}
		var got []string
		for _, row := range res.Rows {
			got = append(got, row.Contender)
			if row.Requests != 6 || row.Errors != 0 {
				t.Errorf("%s, %s: %d requests, %d errors (first: %s); want 6 and 0", res.Scenario, row.Contender, row.Requests, row.Errors, row.FirstError)
			}
			if row.PostgresCPU < 0 {
				t.Errorf("%s, %s: the CPU meter found none of its Postgres backends", res.Scenario, row.Contender)
			}
			if hasServer := row.Contender == PostGraphile; hasServer != (row.ServerCPU >= 0) {
				t.Errorf("%s, %s: server CPU %v (measured for PostGraphile's node only: TaskFlow runs in process here)", res.Scenario, row.Contender, row.ServerCPU)
			}
			if inProcess := row.Contender == TaskFlow; inProcess != (row.LoadCPU < 0) {
				t.Errorf("%s, %s: load generator CPU %v (measured for every contender but the in-process server, whose CPU it would include)", res.Scenario, row.Contender, row.LoadCPU)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: contenders %v, want %v", res.Scenario, got, want)
		}
		if len(res.Statements) < 1 {
			// The token lookup is remembered (store.SessionTTL): the operation's own statements remain.
			t.Errorf("%s: captured %d statements, want the operation's", res.Scenario, len(res.Statements))
		}
	}
	if !rep.Valid() {
		t.Error("the run is marked invalid")
	}
	if len(rep.Comparisons) != 2 {
		t.Fatalf("%d comparisons, want 2", len(rep.Comparisons))
	}
	for _, c := range rep.Comparisons {
		if c.Off.Requests == 0 || c.On.Requests == 0 || c.Off.Errors+c.On.Errors != 0 {
			t.Errorf("%s off/on: %+v / %+v", c.Scenario, c.Off, c.On)
		}
		if len(c.OffRounds) != comparePairs || len(c.OnRounds) != comparePairs || len(c.PairCosts()) != comparePairs {
			t.Errorf("%s: %d off and %d on rounds, %d pair costs; want %d pairs", c.Scenario,
				len(c.OffRounds), len(c.OnRounds), len(c.PairCosts()), comparePairs)
		}
	}
	var sealed []string
	for _, st := range rep.Seal {
		sealed = append(sealed, st.Scenario)
		if st.Events < 1 || st.LagMax <= 0 {
			t.Errorf("sealing in %s: %+v", st.Scenario, st)
		}
	}
	if !slices.Contains(sealed, "createTask") {
		t.Errorf("sealing measured in %v, want createTask among them", sealed)
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	for _, s := range Scenarios {
		if !strings.Contains(b.String(), "| "+s.Name+" |") {
			t.Errorf("the table has no row for %s:\n%s", s.Name, b.String())
		}
	}
	if !strings.Contains(b.String(), "One busy workspace") {
		t.Errorf("the report has no one-workspace ratio:\n%s", b.String())
	}
}

// The cost of a comparison is the median of its pairs' costs, each pair's
// off round against the on round beside it, so a slow stretch of the machine
// that hits one pair does not move it.
func TestComparisonCost(t *testing.T) {
	t.Parallel()
	c := Comparison{
		OffRounds: []float64{1000, 1000, 500, 1000, 1000},
		OnRounds:  []float64{900, 950, 450, 1000, 600},
	}
	want := []float64{0.10, 0.05, 0.10, 0, 0.40}
	got := c.PairCosts()
	for i := range want {
		if i >= len(got) || math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("pair costs %v, want %v", got, want)
		}
	}
	if cost := c.Cost(); math.Abs(cost-0.10) > 1e-9 {
		t.Errorf("cost %v, want the median pair's 0.10", cost)
	}
	if lo, hi := quartiles(got); math.Abs(lo-0.05) > 1e-9 || math.Abs(hi-0.10) > 1e-9 {
		t.Errorf("middle half %v to %v, want 0.05 to 0.10", lo, hi)
	}
}

// TestReplayFreshIDs checks that a replay keeps fixture ids and gives every
// other UUID a new value, the same one within a run, also where it is part of
// a string (the name of an idempotency key's lock).
func TestReplayFreshIDs(t *testing.T) {
	t.Parallel()
	fixture, other := "0192d7a0-0000-7000-8000-000000000001", "0192d7a0-0000-7000-8000-000000000002"
	p := &replayer{known: map[string]bool{fixture: true}, fresh: true}
	remap := map[string]string{}
	lock := "idempotency:" + fixture + ":" + other
	out := p.args([]any{fixture, other, &other, "not-a-uuid", 42, lock}, remap)
	if out[0] != fixture || out[3] != "not-a-uuid" || out[4] != 42 {
		t.Errorf("kept values changed: %v", out)
	}
	if out[1] == other || *(out[2].(*string)) != out[1] {
		t.Errorf("fresh UUID: %v, %v (want a new one, the same twice)", out[1], *(out[2].(*string)))
	}
	if want := "idempotency:" + fixture + ":" + out[1].(string); out[5] != want {
		t.Errorf("lock name %v, want %v", out[5], want)
	}
	random := "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
	for _, id := range []string{other, random} {
		fresh := p.args([]any{id}, remap)[0].(string)
		if v, want := uuid.MustParse(fresh).Version(), uuid.MustParse(id).Version(); v != want {
			t.Errorf("fresh id %s for %s: version %d, want %d", fresh, id, v, want)
		}
	}
}

// TestReplayDoesTheServersWrites replays a captured unit of work whose
// writes are skipped when a lock is taken, the way a claimed idempotency
// key's are: with the lock held elsewhere, the replay fails instead of
// measuring a transaction that wrote nothing; with the lock's name fresh, it
// writes what the server wrote.
func TestReplayDoesTheServersWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE written (id uuid PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{}
	cfg := pool.Config().ConnConfig.Copy()
	cfg.Tracer = rec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id := uuid.NewString()
	lock := "lock:" + id
	const lockSQL = `SELECT set_config('test.locked', pg_try_advisory_xact_lock(hashtextextended($1, 0))::text, true)`
	const insertSQL = `INSERT INTO written SELECT $1::uuid WHERE current_setting('test.locked') = 'true'`
	rec.Start()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockSQL, lock)
	b.Queue(insertSQL, id)
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	stmts := rec.Stop()
	if len(stmts) != 1 || len(stmts[0].Batch) != 4 || stmts[0].Batch[2].Tag.RowsAffected() != 1 {
		t.Fatalf("captured %+v, want one batch of 4 whose insert wrote a row", stmts)
	}

	// Held by another transaction, a name kept as it was: the insert writes
	// nothing, and the replay says so.
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, lock); err != nil {
		t.Fatal(err)
	}
	stale := &replayer{stmts: stmts, known: map[string]bool{id: true}, fresh: true}
	if err := stale.run(ctx, pool); err == nil || !strings.Contains(err.Error(), "INSERT 0 0") {
		t.Errorf("replay with the lock taken: %v, want an error naming the write it skipped", err)
	}

	fresh := &replayer{stmts: stmts, known: map[string]bool{}, fresh: true}
	for range 3 {
		if err := fresh.run(ctx, pool); err != nil {
			t.Fatalf("fresh replay: %v", err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM written`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d rows written, want 4 (the captured one and three replays)", n)
	}
}

// With rounds, the contenders take turns and each row adds its rounds up: the
// requests of every round, and the CPU each round measured. It sends with
// net/http's client (TestHarnessSmoke with the default, fasthttp's).
func TestHarnessRounds(t *testing.T) {
	t.Parallel()
	withPeer := peer.Installed("../peer")
	rep, err := Run(t.Context(), Config{
		DatabaseURL: storetest.URL(t),
		RedisURL:    "redis://127.0.0.1:6379/0",
		Concurrency: 2, Requests: 6, Rounds: 3, Duration: 20 * time.Second, Warmup: 20 * time.Second,
		Users: 3, Tasks: 4, CommentsPerTask: 2, Scenarios: []string{"task", "createTask"},
		Peer: withPeer, PeerDir: "../peer", Client: ClientNet,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		want := []string{TaskFlow, RawSQL}
		if withPeer {
			want = append(want, PostGraphile)
		}
		var got []string
		for _, row := range res.Rows {
			got = append(got, row.Contender)
			if row.Requests != 6 || row.Errors != 0 {
				t.Errorf("%s, %s: %d requests, %d errors (first: %s); want 6 (3 rounds of 2) and 0", res.Scenario, row.Contender,
					row.Requests, row.Errors, row.FirstError)
			}
			if row.PostgresCPU <= 0 {
				t.Errorf("%s, %s: Postgres CPU %v over three rounds", res.Scenario, row.Contender, row.PostgresCPU)
			}
			if len(row.RoundRPS) != 3 {
				t.Errorf("%s, %s: throughput of rounds %v, want three", res.Scenario, row.Contender, row.RoundRPS)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: contenders %v, want %v", res.Scenario, got, want)
		}
		if r := res.RoundRatios(TaskFlow, RawSQL); len(r) != 3 {
			t.Errorf("%s: TaskFlow over raw SQL round by round: %v, want three ratios", res.Scenario, r)
		}
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	if !strings.Contains(b.String(), "raw SQL: ") || !strings.Contains(b.String(), "x (rounds ") {
		t.Errorf("the report does not give the ratios' spread over rounds:\n%s", b.String())
	}
}

// A ratio's rounds pair the contenders' rounds in order, and the report gives
// their least and greatest.
func TestRoundRatios(t *testing.T) {
	t.Parallel()
	r := Result{Rows: []Row{
		{Contender: TaskFlow, Stats: Stats{RoundRPS: []float64{300, 200, 360}}},
		{Contender: PostGraphile, Stats: Stats{RoundRPS: []float64{100, 100, 120}}},
		{Contender: RawSQL, Stats: Stats{RoundRPS: []float64{1000}}},
	}}
	if got := r.RoundRatios(TaskFlow, PostGraphile); !slices.Equal(got, []float64{3, 2, 3}) {
		t.Errorf("round ratios %v, want [3 2 3]", got)
	}
	if got := r.RoundRatios(TaskFlow, RawSQL); got != nil {
		t.Errorf("rounds of different counts paired: %v", got)
	}
	if got := spread(r.RoundRatios(TaskFlow, PostGraphile)); got != " (rounds 2.00x to 3.00x)" {
		t.Errorf("spread %q", got)
	}
	if got := spread([]float64{2}); got != "" {
		t.Errorf("spread of one round %q, want none", got)
	}
}

// mergeRound adds requests, time and CPU; a round without a CPU reading
// leaves the sum unmeasured.
func TestMergeRound(t *testing.T) {
	t.Parallel()
	a := Stats{Requests: 100, Elapsed: time.Second, RPS: 100, P50: time.Millisecond, ServerCPU: 50 * time.Millisecond, PostgresCPU: 20 * time.Millisecond, LoadCPU: 5 * time.Millisecond, RoundRPS: []float64{100}}
	b := Stats{Requests: 300, Elapsed: time.Second, RPS: 300, P50: 3 * time.Millisecond, ServerCPU: 150 * time.Millisecond, PostgresCPU: -1, LoadCPU: 7 * time.Millisecond, RoundRPS: []float64{300}}
	got := mergeRound(mergeRound(Stats{}, a), b)
	if got.Requests != 400 || got.Elapsed != 2*time.Second || got.RPS != 200 || got.ServerCPU != 200*time.Millisecond ||
		got.PostgresCPU != -1 || got.LoadCPU != 12*time.Millisecond || got.P50 != 2500*time.Microsecond ||
		!slices.Equal(got.RoundRPS, []float64{100, 300}) {
		t.Fatalf("merged %+v", got)
	}
}

// An unknown client is a clear error before anything runs.
func TestUnknownClient(t *testing.T) {
	t.Parallel()
	if _, err := newPoster("curl", 1); err == nil || !strings.Contains(err.Error(), ClientFast) {
		t.Errorf("newPoster(curl) = %v; want an error naming the clients", err)
	}
}

// TestSearchersStayUnderTheirLimit checks that a run bounded by its requests
// has searchers enough for all of them to go at once, with no refill of the
// endpoint limit: the warm-up's and the run's searches and the capture's.
func TestSearchersStayUnderTheirLimit(t *testing.T) {
	t.Parallel()
	for _, n := range []int{6, 300, 1000, 20000} {
		cfg := Config{Requests: n, Warmup: 3 * time.Second, Duration: 8 * time.Second}
		users := searchers(cfg)
		if most := (2*n + 10 + users - 1) / users; most > searchLimit {
			t.Errorf("-n %d: %d searchers, up to %d searches each; the limit is %d", n, users, most, searchLimit)
		}
	}
}

// TestWriteCheckCountsWhatWasNotWritten checks that successful requests that
// added fewer (or more) tasks than they should count as failures, and that a
// run that wrote what it should is left alone.
func TestWriteCheckCountsWhatWasNotWritten(t *testing.T) {
	t.Parallel()
	c := &writeCheck{each: 1}
	if s := c.check(Stats{Requests: 10}, 10, 10); s.Errors != 0 || s.FirstError != "" {
		t.Errorf("10 requests, 10 tasks: %+v", s)
	}
	if s := c.check(Stats{Requests: 10}, 10, 3); s.Errors != 7 || !strings.Contains(s.FirstError, "added 3 tasks, want 10") {
		t.Errorf("10 requests, 3 tasks: %d errors, %q; want 7", s.Errors, s.FirstError)
	}
	if s := c.check(Stats{Requests: 10, Errors: 2, FirstError: "HTTP 429"}, 8, 8); s.Errors != 2 || s.FirstError != "HTTP 429" {
		t.Errorf("8 of 10 successful, 8 tasks: %+v", s)
	}
	repeats := &writeCheck{each: 0}
	if s := repeats.check(Stats{Requests: 10}, 10, 1); s.Errors != 1 {
		t.Errorf("repeats that added a task: %d errors, want 1", s.Errors)
	}
}

// Raw SQL's create leaves nothing for TaskFlow's sealer (its events have no
// spine position), and sealed waits until the sealer has caught up with what
// TaskFlow wrote: no contender's turn shares the machine with the sealing of
// another's events.
func TestRawEventsAreNotSealedAndTurnsWaitForTheSealer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := storetest.DB(t)
	fix, err := Prepare(ctx, db, FixtureSizes{Users: 2, Tasks: 1, CommentsPerTask: 1, Spread: 1, Searchers: 1})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Seal(t, db)
	raw := rawCreateTask(false)
	for i := range 3 {
		if err := raw.run(ctx, db.Pool, fix, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := db.AuditSealBacklog(ctx); err != nil || b.Events != 0 {
		t.Fatalf("after raw SQL's creates the sealer has %+v, %v to seal, want nothing", b, err)
	}

	owner := &store.User{ID: fix.Users[0].ID}
	for range 3 {
		if _, err := db.CreateTask(ctx, owner, store.NewTask{ProjectID: fix.InboxID, Title: "sealed later"}); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := sealed(short, db.Pool); err == nil {
		t.Fatal("sealed returned with 3 events unsealed and no sealer running")
	}
	sealerCtx, stop := context.WithCancel(ctx)
	defer stop()
	go (&store.AuditSealer{DB: db}).Run(sealerCtx)
	if err := sealed(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if b, err := db.AuditSealBacklog(ctx); err != nil || b.Events != 0 {
		t.Fatalf("sealed returned with %+v, %v to seal", b, err)
	}
}
