// Package loadgen is TaskFlow's load harness: it prepares fixtures in a
// database of its own and measures, scenario by scenario and side by side in
// one run, TaskFlow's GraphQL API over real HTTP, the least raw SQL the same
// work needs, and PostGraphile 5 serving the same tables (bench/peer), each at
// fixed concurrency after a warm-up, with the server's and the Postgres
// backends' CPU time per request; then it reports throughput, latency
// percentiles, CPU and the ratios between them (see bench/README.md; the
// command is bench/load).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/bench/peer"
	"taskflow/httpapi"
	"taskflow/store"
)

// The contenders, in report order.
const (
	TaskFlow     = "TaskFlow"
	RawSQL       = "raw SQL"
	PostGraphile = "PostGraphile"
	// Replay is TaskFlow's own statements of one request, captured and
	// replayed with pgx (Config.Replay).
	Replay = "TaskFlow's SQL"
)

// The application_name of each pool's Postgres connections: the CPU meter
// finds a contender's backends by it.
const (
	appTaskFlow = "taskflow"
	appTwin     = "taskflow-twin" // the in-process twin when the server is a subprocess
	appRaw      = "raw-sql"
	appReplay   = "taskflow-replay"
	appHarness  = "loadgen" // fixtures, ANALYZE, pg_stat_activity
)

// Config is one run of the harness.
type Config struct {
	// DatabaseURL is a migrated, empty database the run may fill.
	DatabaseURL string
	// RedisURL is the Redis of the rate limiter ("" : in process).
	RedisURL string
	// Concurrency is the number of requests in flight (default 16).
	Concurrency int
	// Duration bounds each measured run (default 8s); Requests, when > 0, bounds
	// it and each warm-up too (whichever comes first).
	Duration time.Duration
	Requests int
	// Warmup is the length of the warm-up of each contender before its
	// measured run (default 3s).
	Warmup time.Duration
	// Rounds splits each contender's measured run into this many rounds of
	// Duration/Rounds, the contenders taking turns round by round (in one
	// order, then the reverse), so that a drift of the machine's speed falls
	// on every contender alike; 0 or 1: one run each, one after the other.
	// The warm-up is before a contender's first round; ANALYZE before each.
	// With Seal, one round.
	Rounds int
	// Scenarios are the names to run; empty: all.
	Scenarios []string
	// Exec runs the server as a subprocess of the real binary (built into a
	// temporary directory) instead of in this process; its RSS and CPU time
	// are then the server's own. Statements are captured by an in-process twin
	// either way.
	Exec bool
	// Peer also measures PostGraphile (bench/peer: installed with npm on
	// first use, started over the run's database).
	Peer bool
	// PeerDir is bench/peer (default: found from the module root).
	PeerDir string
	// Replay also measures TaskFlow's own statements of each request,
	// captured and replayed with pgx: how much of TaskFlow's time its SQL is.
	Replay bool
	// Compare also runs createTask and task(id) against a server with the rate
	// limiter and idempotency off, against the same server with them on.
	Compare bool
	// GuardsOff runs the scenarios against an in-process server with the rate
	// limiter and idempotency off (not with Exec), to profile what they cost.
	GuardsOff bool
	// Seal runs an audit sealer next to the in-process server (the binary of
	// Exec runs its own) and reports, for TaskFlow in the write scenarios, how
	// fast it sealed against how fast events were written, and its lag.
	Seal bool
	// CPUProfile, when set, is a path prefix: the in-process server runs of each
	// scenario are profiled into <prefix>.<scenario>.pprof.
	CPUProfile string
	// Fixture sizes (defaults: 200 users, 100 tasks, 3 comments each).
	Users, Tasks, CommentsPerTask int
	// Client is the HTTP client of the load generator: ClientFast (default)
	// or ClientNet.
	Client string
	// ServerEnv is added to the environment of the server binary (Exec,
	// StartBinary), after the harness's own variables, which it may override.
	ServerEnv []string
	// Progress receives a line per step (nil: nothing).
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.Duration <= 0 {
		c.Duration = 8 * time.Second
	}
	if c.Warmup <= 0 {
		c.Warmup = 3 * time.Second
	}
	if c.Users <= 0 {
		c.Users = 200
	}
	if c.Tasks <= 0 {
		c.Tasks = 100
	}
	if c.CommentsPerTask <= 0 {
		c.CommentsPerTask = 3
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Stats are the measurements of one run.
type Stats struct {
	Requests, Errors int
	FirstError       string
	Elapsed          time.Duration
	RPS              float64
	P50, P95, P99    time.Duration
	// ServerCPU and PostgresCPU are the CPU time the server process and the
	// contender's Postgres backends used during the run; -1: not measured.
	ServerCPU, PostgresCPU time.Duration
	// LoadCPU is the CPU time the harness process used during the run: the
	// load generator's (the HTTP client's, or raw SQL's pgx); -1: not
	// measured (an in-process server, whose CPU it would include).
	LoadCPU time.Duration
	// RoundRPS is the throughput of each round, in order (Config.Rounds).
	RoundRPS []float64
}

// PerRequest returns cpu per request, or -1 when cpu was not measured.
func (s Stats) PerRequest(cpu time.Duration) time.Duration {
	if cpu < 0 || s.Requests == 0 {
		return -1
	}
	return cpu / time.Duration(s.Requests)
}

// Row is one contender's run of a scenario.
type Row struct {
	Contender string
	Stats
}

// Result is one scenario: a row per contender that has an equivalent of it.
type Result struct {
	Scenario   string
	Rows       []Row
	Statements []string  // TaskFlow's statements of one request
	RawSQL     []string  // the raw SQL contender's statements
	Target     float64   // Scenario.Target
	PeerTarget float64   // Scenario.PeerTarget
	CPU        CPUTarget // Scenario.CPU
	// Unavailable says why the scenario could not run (it then fails).
	Unavailable string
}

// Row returns the row of contender, if it ran.
func (r Result) Row(contender string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Contender == contender {
			return row, true
		}
	}
	return Row{}, false
}

// Ratio is a's throughput over b's; 0 when either did not run.
func (r Result) Ratio(a, b string) float64 {
	ra, oka := r.Row(a)
	rb, okb := r.Row(b)
	if !oka || !okb || rb.RPS == 0 {
		return 0
	}
	return ra.RPS / rb.RPS
}

// RoundRatios are a's throughput over b's round by round (the contenders
// take turns within a round, so round i of each ran seconds apart);
// nil when either did not run or they ran different numbers of rounds.
func (r Result) RoundRatios(a, b string) []float64 {
	ra, oka := r.Row(a)
	rb, okb := r.Row(b)
	if !oka || !okb || len(ra.RoundRPS) != len(rb.RoundRPS) {
		return nil
	}
	out := make([]float64, len(ra.RoundRPS))
	for i, x := range ra.RoundRPS {
		if rb.RoundRPS[i] == 0 {
			return nil
		}
		out[i] = x / rb.RoundRPS[i]
	}
	return out
}

// Valid reports whether the scenario ran and every answer of every
// contender was a success.
func (r Result) Valid() bool {
	if r.Unavailable != "" {
		return false
	}
	for _, row := range r.Rows {
		if row.Errors > 0 {
			return false
		}
	}
	return true
}

// Pass reports whether the scenario is valid and met its targets (TaskFlow's
// throughput over raw SQL's, and over PostGraphile's when it ran), if it has
// them.
func (r Result) Pass() bool {
	return r.Valid() && r.rawPass() && r.peerPass() && r.cpuPass()
}

// CPURatios are TaskFlow's server and Postgres CPU per request over
// PostGraphile's; 0 when either was not measured.
func (r Result) CPURatios() (server, postgres float64) {
	tf, ok := r.Row(TaskFlow)
	pg, okPeer := r.Row(PostGraphile)
	if !ok || !okPeer {
		return 0, 0
	}
	ratio := func(a, b time.Duration) float64 {
		if a < 0 || b <= 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	return ratio(tf.PerRequest(tf.ServerCPU), pg.PerRequest(pg.ServerCPU)),
		ratio(tf.PerRequest(tf.PostgresCPU), pg.PerRequest(pg.PostgresCPU))
}

// cpuPass reports whether the CPU targets, if any, were met; true for a CPU
// that was not measured (PostGraphile not run, or the server in process).
func (r Result) cpuPass() bool {
	server, postgres := r.CPURatios()
	return (r.CPU.Server == 0 || server == 0 || server <= r.CPU.Server) &&
		(r.CPU.Postgres == 0 || postgres == 0 || postgres <= r.CPU.Postgres)
}

// rawPass reports whether the target against raw SQL, if any, was met.
func (r Result) rawPass() bool {
	return r.Target == 0 || r.Ratio(TaskFlow, RawSQL) >= r.Target
}

// peerPass reports whether the target against PostGraphile, if any, was met;
// true when PostGraphile did not run.
func (r Result) peerPass() bool {
	_, ran := r.Row(PostGraphile)
	return r.PeerTarget == 0 || !ran || r.Ratio(TaskFlow, PostGraphile) >= r.PeerTarget
}

// comparePairs is how many pairs of rounds a comparison runs.
const comparePairs = 12

// Comparison is a scenario against the server with limiter and idempotency
// off and on.
type Comparison struct {
	Scenario string
	Off, On  Stats
	// OffRounds and OnRounds are the throughputs of the alternating rounds:
	// OffRounds[i] and OnRounds[i] ran one right after the other (a pair).
	OffRounds, OnRounds []float64
}

// PairCosts are the throughput lost by turning them on in each pair of
// adjacent rounds, as fractions of off.
func (c Comparison) PairCosts() []float64 {
	var out []float64
	for i := range min(len(c.OffRounds), len(c.OnRounds)) {
		if c.OffRounds[i] > 0 {
			out = append(out, 1-c.OnRounds[i]/c.OffRounds[i])
		}
	}
	return out
}

// Cost is the throughput lost by turning them on, as a fraction of off: the
// median of the pairs' costs. The machine's speed drifts by more than the
// cost within a run (a pair of 5 s rounds cost from -9% to 26% in one run on
// a shared VM); a pair's two rounds see nearly the same machine, and the
// median of many pairs is moved by none of them alone.
func (c Comparison) Cost() float64 { return median(c.PairCosts()) }

// quartiles returns the 25th and 75th percentiles of xs (nearest rank).
func quartiles(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[(len(s)-1)/4], s[len(s)-1-(len(s)-1)/4]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Report is everything a run measured.
type Report struct {
	Config      Config
	Started     time.Time
	LoadAvg     string // /proc/loadavg at the start and the end
	Results     []Result
	Comparisons []Comparison
	// RSSPeak is the peak resident set of the server process (exec mode) or of
	// this process, which then holds the server and the load generator.
	RSSPeak    int64
	RSSOfWhat  string
	PeerRSS    int64 // PostGraphile's node process, peak resident set
	PoolConns  int32
	GoMaxProcs int
	// Seal is what the audit sealer did in the write scenarios (Config.Seal).
	Seal []SealStats
}

// contender is one way of doing the scenarios' work.
type contender struct {
	name  string
	meter cpuMeter
	// work returns what does request i of worker w of sc, given TaskFlow's
	// statements of one request; nil when the contender has no equivalent.
	work func(sc Scenario, stmts []Statement) func(ctx context.Context, w, i int) error
}

// Run prepares the fixtures, runs every scenario with every contender, and
// returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	rep := &Report{Config: cfg, Started: time.Now(), LoadAvg: loadAvg()}
	// The server logs as in production (JSON access lines at info), to nowhere.
	log := slog.New(httpapi.LogHandler(slog.NewJSONHandler(io.Discard, nil)))

	poolCfg, err := store.PoolConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	rep.PoolConns = poolCfg.MaxConns
	ctl, err := newPool(ctx, poolCfg, appHarness, nil)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	rawPool, err := newPool(ctx, poolCfg, appRaw, nil)
	if err != nil {
		return nil, err
	}
	defer rawPool.Close()

	sizes := FixtureSizes{cfg.Users, cfg.Tasks, cfg.CommentsPerTask, cfg.Concurrency, searchers(cfg)}
	fmt.Fprintf(cfg.Progress, "fixtures: %d users (and %d searchers), %d tasks with %d comments each, %d more workspaces\n",
		sizes.Users, sizes.Searchers, sizes.Tasks, sizes.CommentsPerTask, sizes.Spread)
	fix, err := Prepare(ctx, store.New(ctl, log), sizes)
	if err != nil {
		return nil, err
	}

	rec := &Recorder{}
	if cfg.GuardsOff && cfg.Exec {
		return nil, errors.New("loadgen: GuardsOff is for the in-process server, not with Exec")
	}
	twinApp := appTaskFlow
	if cfg.Exec || cfg.Seal {
		twinApp = appTwin
	}
	twin, err := startInproc(ctx, cfg, poolCfg, rec, !cfg.GuardsOff, log, twinApp)
	if err != nil {
		return nil, err
	}
	defer twin.close()
	target := twin
	if cfg.Exec {
		fmt.Fprintf(cfg.Progress, "building and starting the server binary\n")
		if target, err = startExec(ctx, cfg); err != nil {
			return nil, err
		}
		defer target.close()
		rep.RSSOfWhat = "server subprocess (VmHWM of the real binary)"
	} else {
		rep.RSSOfWhat = "harness process holding server and load generator (VmHWM)"
	}
	if cfg.Seal && !cfg.Exec {
		// A server of its own with the sealer, on an untraced pool: the
		// twin's recorder must not capture the sealer's statements.
		if target, err = startInproc(ctx, cfg, poolCfg, nil, !cfg.GuardsOff, log, appTaskFlow); err != nil {
			return nil, err
		}
		defer target.close()
		sealCtx, stopSealer := context.WithCancel(ctx)
		defer stopSealer()
		go (&store.AuditSealer{DB: target.db}).Run(sealCtx)
	}
	client, err := newPoster(cfg.Client, cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	// A sealer runs in the server binary (Exec) or next to the in-process
	// server (Seal); each contender's run waits for it to catch up.
	var settle func(context.Context) error
	if cfg.Exec || cfg.Seal {
		settle = func(ctx context.Context) error { return sealed(ctx, ctl) }
	}

	contenders := []contender{
		{name: TaskFlow, meter: cpuMeter{pool: ctl, serverPID: target.pid, appName: appTaskFlow, self: cfg.Exec},
			work: func(sc Scenario, _ []Statement) func(context.Context, int, int) error {
				return taskflowRequests(client, target.url, sc, fix)
			}},
		{name: RawSQL, meter: cpuMeter{pool: ctl, appName: appRaw, self: true},
			work: func(sc Scenario, _ []Statement) func(context.Context, int, int) error {
				return func(ctx context.Context, w, i int) error { return sc.raw.run(ctx, rawPool, fix, w, i) }
			}},
	}
	if cfg.Peer {
		fmt.Fprintf(cfg.Progress, "starting PostGraphile (bench/peer)\n")
		srv, err := startPeer(ctx, cfg, ctl, int(poolCfg.MaxConns))
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		defer func() { rep.PeerRSS = statusKB(fmt.Sprintf("/proc/%d/status", srv.PID), "VmHWM:") }()
		contenders = append(contenders, contender{name: PostGraphile,
			meter: cpuMeter{pool: ctl, serverPID: srv.PID, appName: peer.ApplicationName, self: true},
			work: func(sc Scenario, _ []Statement) func(context.Context, int, int) error {
				if sc.peer == nil {
					return nil
				}
				return func(ctx context.Context, w, i int) error {
					return client.post(ctx, srv.URL, "", sc.peer(fix, w, i), sc.Want)
				}
			}})
	}
	if cfg.Replay {
		replayPool, err := newPool(ctx, poolCfg, appReplay, nil)
		if err != nil {
			return nil, err
		}
		defer replayPool.Close()
		contenders = append(contenders, contender{name: Replay, meter: cpuMeter{pool: ctl, appName: appReplay, self: true},
			work: func(sc Scenario, stmts []Statement) func(context.Context, int, int) error {
				if sc.PerWorker {
					return nil
				}
				rp := &replayer{stmts: stmts, known: fix.Known, fresh: sc.Fresh}
				return func(ctx context.Context, w, i int) error { return rp.run(ctx, replayPool) }
			}})
	}

	for _, sc := range selected(cfg.Scenarios) {
		fmt.Fprintf(cfg.Progress, "%s: statement capture\n", sc.Name)
		stmts, err := capture(ctx, client, target, twin, rec, sc, fix)
		if err != nil {
			// Reported as a failed row, not skipped in silence.
			fmt.Fprintf(cfg.Progress, "%s: %v\n", sc.Name, err)
			rep.Results = append(rep.Results, Result{Scenario: sc.Name, Target: sc.Target, PeerTarget: sc.PeerTarget, CPU: sc.CPU, Unavailable: err.Error()})
			continue
		}
		res := Result{Scenario: sc.Name, Target: sc.Target, PeerTarget: sc.PeerTarget, CPU: sc.CPU, Statements: describeStatements(stmts), RawSQL: sc.raw.SQL}
		type turn struct {
			c  contender
			do func(context.Context, int, int) error
			s  Stats
		}
		var turns []*turn
		for _, c := range contenders {
			if do := c.work(sc, stmts); do != nil {
				turns = append(turns, &turn{c: c, do: do})
			}
		}
		rounds := max(1, cfg.Rounds)
		if cfg.Seal {
			rounds = 1
		}
		for r := range rounds {
			round := cfg
			round.Duration = cfg.Duration / time.Duration(rounds)
			if cfg.Requests > 0 {
				round.Requests = max(1, cfg.Requests/rounds)
			}
			if r > 0 {
				round.Warmup = 0
			}
			order := slices.Clone(turns)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				c := t.c
				if rounds > 1 {
					fmt.Fprintf(cfg.Progress, "%s: %s, round %d of %d\n", sc.Name, c.name, r+1, rounds)
				} else {
					fmt.Fprintf(cfg.Progress, "%s: %s\n", sc.Name, c.name)
				}
				profile := c.name == TaskFlow && !cfg.Exec && r == 0
				sealing := cfg.Seal && c.name == TaskFlow && sc.Fresh
				stopSampling := func() []oldestSample { return nil }
				if sealing {
					stopSampling = oldestSampler(ctx, ctl)
				}
				// With Seal, sealStats measures the catch-up after the run.
				settleAfter := settle
				if sealing {
					settleAfter = nil
				}
				s, err := runContender(ctx, round, ctl, client, c.meter, t.do, sc.Name, profile, written(sc, fix),
					settle, settleAfter, c.name == TaskFlow)
				if err != nil {
					return nil, err
				}
				if samples := stopSampling(); sealing {
					// The measured run only, not its warm-up.
					end := time.Now()
					st, err := sealStats(ctx, ctl, sc.Name, end.Add(-s.Elapsed), end, samples)
					if err != nil {
						return nil, err
					}
					if st.Events > 0 { // a storm of replays writes nothing
						fmt.Fprintf(cfg.Progress, "  %d events sealed, lag p99 %s\n", st.Events, ms(st.LagP99))
						rep.Seal = append(rep.Seal, st)
					}
				}
				fmt.Fprintf(cfg.Progress, "  %.0f req/s, %d failed\n", s.RPS, s.Errors)
				s.RoundRPS = []float64{s.RPS}
				t.s = mergeRound(t.s, s)
			}
		}
		for _, t := range turns {
			res.Rows = append(res.Rows, Row{Contender: t.c.name, Stats: t.s})
		}
		rep.Results = append(rep.Results, res)
	}

	if cfg.Compare {
		if err := compare(ctx, cfg, poolCfg, log, client, fix, rep); err != nil {
			return nil, err
		}
	}

	if cfg.Exec {
		rep.RSSPeak = target.rssPeak()
	} else {
		rep.RSSPeak = selfRSSPeak()
	}
	rep.GoMaxProcs = gomaxprocs()
	rep.LoadAvg += " → " + loadAvg()
	return rep, nil
}

// runContender warms the contender up for cfg.Warmup, refreshes the planner's
// statistics (ANALYZE), then measures it for cfg.Duration with its CPU meter
// read before and after. Failed requests of the warm-up count as failures of
// the run too, and so do successful ones that did not write what they should
// have (writes, the scenario's written; nil for a read).
//
// When a TaskFlow audit sealer runs during the runs, settle waits until it
// has sealed every event written so far (nil: none runs). It is called
// before the measured run, so that no contender's run shares the machine
// with the sealing of events another contender (or a warm-up) wrote, and
// settleAfter after it: the sealer's work for the events of TaskFlow's own
// run (sealer true) is part of what a TaskFlow request costs, so its CPU
// meter is read once they are sealed; any other contender's is read before.
func runContender(ctx context.Context, cfg Config, ctl *pgxpool.Pool, client poster, meter cpuMeter,
	do func(context.Context, int, int) error, scenario string, profile bool, writes *writeCheck,
	settle, settleAfter func(context.Context) error, sealer bool) (Stats, error) {
	// Every contender starts on fresh HTTP connections: one left idle since
	// the contender's last run may be closed by its server as it is reused.
	client.closeIdle()
	var first int64
	if writes != nil {
		var err error
		if first, err = writes.count(ctx, ctl); err != nil {
			return Stats{}, err
		}
	}
	w := measure(ctx, warmUp(cfg), do)
	// Fresh planner statistics: the runs before this one may have grown a
	// table (createTask adds thousands of tasks and audit events in seconds)
	// faster than autovacuum re-analyzes it, and a plan chosen for the table
	// as it was (a sort of the whole audit partition instead of an ordered
	// index scan) measures neither a production database nor the contender.
	if _, err := ctl.Exec(ctx, "ANALYZE"); err != nil {
		return Stats{}, fmt.Errorf("analyze: %w", err)
	}
	noop := func(context.Context) error { return nil }
	if settle == nil {
		settle = noop
	}
	if settleAfter == nil {
		settleAfter = noop
	}
	if err := settle(ctx); err != nil {
		return Stats{}, err
	}
	stop := startProfile(cfg.CPUProfile, scenario, profile)
	before := meter.snapshot(ctx)
	s := measure(ctx, cfg, do)
	if sealer {
		if err := settleAfter(ctx); err != nil {
			return Stats{}, err
		}
	}
	after := meter.snapshot(ctx)
	stop()
	if !sealer {
		if err := settleAfter(ctx); err != nil {
			return Stats{}, err
		}
	}
	s.ServerCPU, s.PostgresCPU, s.LoadCPU = cpuUsed(before, after)
	s = withWarmUp(s, w)
	if writes != nil {
		last, err := writes.count(ctx, ctl)
		if err != nil {
			return Stats{}, err
		}
		s = writes.check(s, w.Requests-w.Errors+s.Requests-(s.Errors-w.Errors), last-first)
	}
	return s, nil
}

// writeCheck counts the tasks of a scenario that writes: those of projects,
// each successful request adding each.
type writeCheck struct {
	projects []string
	each     int
}

// written returns the write check of sc, nil for a read.
func written(sc Scenario, f *Fixtures) *writeCheck {
	if sc.writes == nil {
		return nil
	}
	projects, each := sc.writes(f)
	return &writeCheck{projects: projects, each: each}
}

// count returns how many tasks the projects hold.
func (c *writeCheck) count(ctx context.Context, ctl *pgxpool.Pool) (int64, error) {
	var n int64
	if err := ctl.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE project_id = ANY($1::uuid[])`, c.projects).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the tasks written: %w", err)
	}
	return n, nil
}

// check returns s with the successful requests (ok) that did not add their
// tasks (added in all) counted as failures.
func (c *writeCheck) check(s Stats, ok int, added int64) Stats {
	if want := int64(ok * c.each); added != want {
		missing := int(max(1, abs(want-added)/int64(max(1, c.each))))
		if s.Errors == 0 {
			s.FirstError = fmt.Sprintf("%d successful requests added %d tasks, want %d", ok, added, want)
		}
		s.Errors += missing
	}
	return s
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// compare runs createTask and task(id) against two in-process servers on the
// same database, one with the rate limiter and idempotency off and one with
// both on, in pairs of adjacent rounds.
func compare(ctx context.Context, cfg Config, poolCfg *pgxpool.Config, log *slog.Logger, client poster, fix *Fixtures, rep *Report) error {
	off, err := startInproc(ctx, cfg, poolCfg, nil, false, log, appTwin)
	if err != nil {
		return err
	}
	defer off.close()
	on, err := startInproc(ctx, cfg, poolCfg, nil, true, log, appTwin)
	if err != nil {
		return err
	}
	defer on.close()
	for _, name := range []string{"createTask", "task"} {
		sc, _ := ScenarioNamed(name)
		fmt.Fprintf(cfg.Progress, "%s: limiter and idempotency off vs on\n", name)
		c := Comparison{Scenario: name}
		// Twelve pairs of rounds, the pairs in turn off-on and on-off
		// (ABBA), so that a drift of the machine's speed, or of the
		// database as it grows, hits both sides alike.
		round := cfg
		round.Duration = cfg.Duration / 4
		if round.Requests > 0 {
			round.Requests = max(1, cfg.Requests/4)
		}
		run := func(isOn bool) {
			url := off.url
			if isOn {
				url = on.url
			}
			s := measure(ctx, round, taskflowRequests(client, url, sc, fix))
			if isOn {
				c.On = merge(c.On, s)
				c.OnRounds = append(c.OnRounds, s.RPS)
			} else {
				c.Off = merge(c.Off, s)
				c.OffRounds = append(c.OffRounds, s.RPS)
			}
			fmt.Fprintf(cfg.Progress, "  on=%v: %.0f rps\n", isOn, s.RPS)
		}
		for pair := range comparePairs {
			onFirst := pair%2 == 1
			run(onFirst)
			run(!onFirst)
		}
		rep.Comparisons = append(rep.Comparisons, c)
	}
	return nil
}

// startPeer installs PostGraphile if needed, creates its schema and starts it
// over the run's database.
func startPeer(ctx context.Context, cfg Config, ctl *pgxpool.Pool, poolSize int) (*peer.Server, error) {
	dir := cfg.PeerDir
	if dir == "" {
		root, err := moduleRoot(ctx)
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(root, "bench", "peer")
	}
	if err := peer.Install(ctx, dir, cfg.Progress); err != nil {
		return nil, err
	}
	if err := peer.Prepare(ctx, ctl); err != nil {
		return nil, err
	}
	return peer.Start(ctx, dir, cfg.DatabaseURL, poolSize)
}

// capture sends a few requests of sc to the target (and its twin), then one to
// the twin alone while rec records the statements it runs. The warm-up ends
// with the captured request's own user, so that what a server remembers of a
// user in the steady state (its token) is remembered for the capture too.
func capture(ctx context.Context, client poster, target, twin *server, rec *Recorder, sc Scenario, fix *Fixtures) ([]Statement, error) {
	const captured = 10
	send := func(url string, i int) error { return taskflowRequests(client, url, sc, fix)(ctx, 0, i) }
	for _, i := range []int{0, 1, captured} {
		if err := send(target.url, i); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		if target != twin {
			if err := send(twin.url, i); err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	rec.Start()
	err := send(twin.url, captured)
	stmts := rec.Stop()
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return stmts, nil
}

func selected(names []string) []Scenario {
	if len(names) == 0 {
		return Scenarios
	}
	var out []Scenario
	for _, s := range Scenarios {
		if slices.Contains(names, s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// measure runs fn from cfg.Concurrency goroutines (workers w = 0, 1, ...;
// request i counts over all of them) until cfg.Duration passed or
// cfg.Requests were sent. Requests in flight at the deadline finish and count:
// cutting them off would leave cancelled statements behind in Postgres (and
// backends queued on a lock with nobody to answer) that slow the next run.
func measure(ctx context.Context, cfg Config, fn func(ctx context.Context, w, i int) error) Stats {
	var next atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	var errs int
	var firstErr string
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Go(func() {
			var lat []time.Duration
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1)) - 1
				if cfg.Requests > 0 && i >= cfg.Requests {
					break
				}
				t0 := time.Now()
				err := fn(ctx, w, i)
				lat = append(lat, time.Since(t0))
				if err != nil {
					mu.Lock()
					if errs == 0 {
						firstErr = err.Error()
					}
					errs++
					mu.Unlock()
				}
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	s := Stats{Requests: len(all), Errors: errs, FirstError: firstErr, Elapsed: time.Since(start), ServerCPU: -1, PostgresCPU: -1, LoadCPU: -1}
	s.finish(all)
	return s
}

func (s *Stats) finish(lat []time.Duration) {
	if s.Elapsed > 0 {
		s.RPS = float64(s.Requests) / s.Elapsed.Seconds()
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	s.P50, s.P95, s.P99 = pct(0.50), pct(0.95), pct(0.99)
}

// mergeRound adds a round of a contender to its rounds so far: merge, with the
// CPU used summed (-1 when a round did not measure it).
func mergeRound(a, b Stats) Stats {
	if a.Requests == 0 && a.Elapsed == 0 {
		return b
	}
	out := merge(a, b)
	if a.Requests == 0 {
		out = b
		out.Requests, out.Errors, out.Elapsed = a.Requests+b.Requests, a.Errors+b.Errors, a.Elapsed+b.Elapsed
		if out.Elapsed > 0 {
			out.RPS = float64(out.Requests) / out.Elapsed.Seconds()
		}
	}
	out.ServerCPU = sumCPU(a.ServerCPU, b.ServerCPU)
	out.PostgresCPU = sumCPU(a.PostgresCPU, b.PostgresCPU)
	out.LoadCPU = sumCPU(a.LoadCPU, b.LoadCPU)
	out.RoundRPS = append(slices.Clone(a.RoundRPS), b.RoundRPS...)
	return out
}

// merge adds two runs of one server; percentiles are the request-weighted mean of
// the runs' (close enough for a cost comparison).
func merge(a, b Stats) Stats {
	if a.Requests == 0 {
		return b
	}
	n := a.Requests + b.Requests
	w := func(x, y time.Duration) time.Duration {
		return time.Duration((int64(x)*int64(a.Requests) + int64(y)*int64(b.Requests)) / int64(n))
	}
	out := Stats{Requests: n, Errors: a.Errors + b.Errors, FirstError: a.FirstError, Elapsed: a.Elapsed + b.Elapsed,
		P50: w(a.P50, b.P50), P95: w(a.P95, b.P95), P99: w(a.P99, b.P99), ServerCPU: -1, PostgresCPU: -1, LoadCPU: -1}
	if out.FirstError == "" {
		out.FirstError = b.FirstError
	}
	out.RPS = float64(n) / out.Elapsed.Seconds()
	return out
}

// taskflowRequests returns what sends TaskFlow request i of worker w of sc to
// the server at url and checks the answer.
func taskflowRequests(client poster, url string, sc Scenario, f *Fixtures) func(ctx context.Context, w, i int) error {
	return func(ctx context.Context, w, i int) error {
		u, body := sc.request(f, w, i)
		return client.post(ctx, url+"/query", u.Token, body, sc.Want)
	}
}

func startProfile(prefix, name string, enabled bool) func() {
	if prefix == "" || !enabled {
		return func() {}
	}
	path := prefix + "." + name + ".pprof"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
