// Package loadgen is TaskFlow's load harness: it prepares fixtures in a
// database of its own, drives the GraphQL API over real HTTP at fixed
// concurrency, and replays the very SQL statements each request made directly
// with pgx as the baseline, then reports throughput and latency percentiles of
// both (see bench/README.md; the command is bench/load).
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/httpapi"
	"taskflow/store"
)

// Config is one run of the harness.
type Config struct {
	// DatabaseURL is a migrated, empty database the run may fill.
	DatabaseURL string
	// RedisURL is the Redis of the rate limiter ("" : in process).
	RedisURL string
	// Concurrency is the number of requests in flight (default 16).
	Concurrency int
	// Duration bounds each measured run (default 5s); Requests, when > 0, bounds
	// it too (whichever comes first).
	Duration time.Duration
	Requests int
	// Scenarios are the names to run; empty: all.
	Scenarios []string
	// Exec runs the server as a subprocess of the real binary (built into a
	// temporary directory) instead of in this process; its RSS is then the
	// server's own. Statements are captured by an in-process twin either way.
	Exec bool
	// Compare also runs createTask and task(id) against a server with the rate
	// limiter and idempotency off, against the same server with them on.
	Compare bool
	// GuardsOff runs the scenarios against an in-process server with the rate
	// limiter and idempotency off (not with Exec), to profile what they cost.
	GuardsOff bool
	// CPUProfile, when set, is a path prefix: the in-process server runs of each
	// scenario are profiled into <prefix>.<scenario>.pprof.
	CPUProfile string
	// Fixture sizes (defaults: 200 users, 100 tasks, 3 comments each).
	Users, Tasks, CommentsPerTask int
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
		c.Duration = 5 * time.Second
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
}

// Result is one scenario: the server, its raw-SQL baseline and their ratio.
type Result struct {
	Scenario   string
	Server     Stats
	Raw        Stats
	Statements []string
	Ratio      float64
	Target     float64
	// Unavailable says why the scenario could not run (it then fails).
	Unavailable string
}

// Pass reports whether the scenario met its target and had no errors.
func (r Result) Pass() bool {
	return r.Unavailable == "" && r.Server.Errors == 0 && r.Raw.Errors == 0 && r.Ratio >= r.Target
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
	PoolConns  int32
	GoMaxProcs int
}

// Run prepares the fixtures, runs every scenario against the server and its
// raw-SQL baseline, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	rep := &Report{Config: cfg, Started: time.Now(), LoadAvg: loadAvg()}
	// The server logs as in production (JSON access lines at info), to nowhere.
	log := slog.New(httpapi.LogHandler(slog.NewJSONHandler(io.Discard, nil)))

	poolCfg, err := store.PoolConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	rawPool, err := pgxpool.NewWithConfig(ctx, poolCfg.Copy())
	if err != nil {
		return nil, err
	}
	defer rawPool.Close()
	rep.PoolConns = poolCfg.MaxConns

	fmt.Fprintf(cfg.Progress, "fixtures: %d users, %d tasks with %d comments each\n", cfg.Users, cfg.Tasks, cfg.CommentsPerTask)
	fix, err := Prepare(ctx, store.New(rawPool, log), FixtureSizes{cfg.Users, cfg.Tasks, cfg.CommentsPerTask})
	if err != nil {
		return nil, err
	}

	rec := &Recorder{}
	if cfg.GuardsOff && cfg.Exec {
		return nil, errors.New("loadgen: GuardsOff is for the in-process server, not with Exec")
	}
	twin, err := startInproc(ctx, cfg, poolCfg, rec, !cfg.GuardsOff, log)
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
	client := newClient(cfg.Concurrency)

	for _, sc := range selected(cfg.Scenarios) {
		// Fresh planner statistics first: the scenarios before this one may
		// have grown a table (createTask adds thousands of tasks and audit
		// events in seconds) faster than autovacuum re-analyzes it, and a plan
		// chosen for the table as it was (a sort of the whole audit partition
		// instead of an ordered index scan) measures neither a production
		// database nor the server. Both the server and the raw replay get them.
		if _, err := rawPool.Exec(ctx, "ANALYZE"); err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
		fmt.Fprintf(cfg.Progress, "%s: warm-up and statement capture\n", sc.Name)
		stmts, err := warmUp(ctx, client, target, twin, rec, sc, fix)
		if err != nil {
			// Reported as a failed row, not skipped in silence.
			fmt.Fprintf(cfg.Progress, "%s: %v\n", sc.Name, err)
			rep.Results = append(rep.Results, Result{Scenario: sc.Name, Target: sc.Target, Unavailable: err.Error()})
			continue
		}
		res := Result{Scenario: sc.Name, Target: sc.Target, Statements: describeStatements(stmts)}

		stop := startProfile(cfg.CPUProfile, sc.Name, !cfg.Exec)
		fmt.Fprintf(cfg.Progress, "%s: server, %d statements per request\n", sc.Name, len(stmts))
		res.Server = measure(ctx, cfg, func(ctx context.Context, i int) error {
			return send(ctx, client, target.url, sc, fix, i)
		})
		stop()
		fmt.Fprintf(cfg.Progress, "%s: raw SQL\n", sc.Name)
		rp := &replayer{stmts: stmts, known: fix.Known, fresh: sc.Fresh}
		res.Raw = measure(ctx, cfg, func(ctx context.Context, i int) error { return rp.run(ctx, rawPool) })
		if res.Raw.RPS > 0 {
			res.Ratio = res.Server.RPS / res.Raw.RPS
		}
		rep.Results = append(rep.Results, res)
	}

	if cfg.Compare {
		off, err := startInproc(ctx, cfg, poolCfg, nil, false, log)
		if err != nil {
			return nil, err
		}
		defer off.close()
		on, err := startInproc(ctx, cfg, poolCfg, nil, true, log)
		if err != nil {
			return nil, err
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
				s := measure(ctx, round, func(ctx context.Context, i int) error {
					return send(ctx, client, url, sc, fix, i)
				})
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

// warmUp sends a few requests of sc to the target (and its twin), then one to
// the twin alone while rec records the statements it runs.
func warmUp(ctx context.Context, client *http.Client, target, twin *server, rec *Recorder, sc Scenario, fix *Fixtures) ([]Statement, error) {
	for i := range 3 {
		if err := send(ctx, client, target.url, sc, fix, -1-i); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		if target != twin {
			if err := send(ctx, client, twin.url, sc, fix, -1-i); err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	rec.Start()
	err := send(ctx, client, twin.url, sc, fix, -10)
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

// measure runs fn from cfg.Concurrency goroutines until cfg.Duration passed or
// cfg.Requests were sent. Requests in flight at the deadline finish and count:
// cutting them off would leave cancelled statements behind in Postgres (and
// backends queued on a lock with nobody to answer) that slow the next run.
func measure(ctx context.Context, cfg Config, fn func(ctx context.Context, i int) error) Stats {
	var next atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	var errs int
	var firstErr string
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			var lat []time.Duration
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1)) - 1
				if cfg.Requests > 0 && i >= cfg.Requests {
					break
				}
				t0 := time.Now()
				err := fn(ctx, i)
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
	s := Stats{Requests: len(all), Errors: errs, FirstError: firstErr, Elapsed: time.Since(start)}
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
		P50: w(a.P50, b.P50), P95: w(a.P95, b.P95), P99: w(a.P99, b.P99)}
	if out.FirstError == "" {
		out.FirstError = b.FirstError
	}
	out.RPS = float64(n) / out.Elapsed.Seconds()
	return out
}

func newClient(concurrency int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4 * concurrency
	t.MaxIdleConnsPerHost = 4 * concurrency
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// send posts request i of sc and checks that it succeeded.
func send(ctx context.Context, client *http.Client, url string, sc Scenario, f *Fixtures, i int) error {
	if i < 0 {
		i = -i
	}
	u, body := sc.request(f, i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/query", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+u.Token)
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || bytes.Contains(out, []byte(`"errors"`)) {
		return fmt.Errorf("HTTP %d: %.200s", res.StatusCode, out)
	}
	return nil
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
