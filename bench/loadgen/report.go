package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// RSSLimit is the target for the server's resident set.
const RSSLimit = 150 << 20

// GuardCostLimit is the most throughput the limiter and idempotency together
// may cost.
const GuardCostLimit = 0.15

// Markdown writes the report as markdown tables.
func (r *Report) Markdown(w io.Writer) {
	c := r.Config
	mode := "in-process server (real HTTP on loopback; its CPU can't be told from the load generator's)"
	if c.Exec {
		mode = "server binary as a subprocess (real HTTP on loopback)"
		if len(c.ServerEnv) > 0 {
			mode = "server binary as a subprocess (real HTTP on loopback; its environment adds " + strings.Join(c.ServerEnv, " ") + ")"
		}
	}
	turns := "one run per contender, back to back"
	if c.Rounds > 1 && !c.Seal {
		turns = fmt.Sprintf("in %d rounds of %s, the contenders taking turns (p50 and p99: the rounds' mean weighted by requests)", c.Rounds, c.Duration/time.Duration(c.Rounds))
	}
	fmt.Fprintf(w, "Run of %s: concurrency %d, %s per contender (%s) after a %s warm-up, ANALYZE before each; %s; GOMAXPROCS %d, pool max %d connections; load average %s.\n\n",
		r.Started.UTC().Format(time.RFC3339), c.Concurrency, c.Duration, turns, c.Warmup, mode, r.GoMaxProcs, r.PoolConns, r.LoadAvg)
	client := c.Client
	if client == "" {
		client = ClientFast
	}
	fmt.Fprintf(w, "CPU per request: the server process's (TaskFlow's binary, PostGraphile's node; /proc/<pid>/stat), its Postgres backends' (those with its application_name; /proc/<pid>/schedstat) and the load generator's (this process, %s's client or raw SQL's pgx; getrusage), read before and after the measured run.\n\n", client)
	fmt.Fprintf(w, "| scenario | contender | req/s | p50 | p99 | server CPU | Postgres CPU | load generator CPU | × raw SQL | × PostGraphile | failed |\n")
	fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, res := range r.Results {
		if res.Unavailable != "" {
			fmt.Fprintf(w, "| %s | — | | | | | | | | | could not run |\n", res.Scenario)
			continue
		}
		for i, row := range res.Rows {
			name := res.Scenario
			if i > 0 {
				name = ""
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %d |\n", name, row.Contender, row.RPS,
				ms(row.P50), ms(row.P99), us(row.PerRequest(row.ServerCPU)), us(row.PerRequest(row.PostgresCPU)), us(row.PerRequest(row.LoadCPU)),
				ratio(res, row.Contender, RawSQL), ratio(res, row.Contender, PostGraphile), row.Errors)
		}
	}
	if one, spread := r.result("createTask"), r.result("createTaskSpread"); one != nil && spread != nil {
		fmt.Fprintf(w, "\nOne busy workspace: createTask in one workspace over the same spread over %d workspaces (req/s):", c.Concurrency)
		sep := ""
		for _, row := range one.Rows {
			if s, ok := spread.Row(row.Contender); ok && s.RPS > 0 {
				fmt.Fprintf(w, "%s %s %.2fx", sep, row.Contender, row.RPS/s.RPS)
				sep = ","
			}
		}
		fmt.Fprintf(w, ".\n")
	}
	for _, res := range r.Results {
		if res.Target > 0 {
			fmt.Fprintf(w, "\nTarget: %s, TaskFlow ≥ %.2fx raw SQL: %.2fx%s, %s.\n", res.Scenario, res.Target,
				res.Ratio(TaskFlow, RawSQL), spread(res.RoundRatios(TaskFlow, RawSQL)), passFail(res.Valid() && res.rawPass()))
		}
		if _, ran := res.Row(PostGraphile); res.PeerTarget > 0 && ran {
			fmt.Fprintf(w, "\nTarget: %s, TaskFlow ≥ %.2fx PostGraphile: %.2fx%s, %s.\n", res.Scenario, res.PeerTarget,
				res.Ratio(TaskFlow, PostGraphile), spread(res.RoundRatios(TaskFlow, PostGraphile)), passFail(res.Valid() && res.peerPass()))
		}
		if server, postgres := res.CPURatios(); res.CPU != (CPUTarget{}) && (server > 0 || postgres > 0) {
			fmt.Fprintf(w, "\nTarget: %s, TaskFlow's CPU per request ≤ %.1fx PostGraphile's (server) and ≤ %.1fx (Postgres): %.2fx and %.2fx, %s.\n",
				res.Scenario, res.CPU.Server, res.CPU.Postgres, server, postgres, passFail(res.cpuPass()))
		}
	}
	if !r.Valid() {
		fmt.Fprintf(w, "\n**INVALID RUN: some answers were not a success (see Errors below).**\n")
	}
	if len(r.Comparisons) > 0 {
		fmt.Fprintf(w, "\nRate limiter + idempotency, off vs on (in-process servers on the same database, %d pairs of adjacent rounds; the cost is the median of the pairs' costs):\n\n", comparePairs)
		fmt.Fprintf(w, "| scenario | off rps | off p50 | off p99 | on rps | on p50 | on p99 | pair costs (middle half) | cost | target | pass |\n")
		fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |\n")
		for _, cmp := range r.Comparisons {
			pass := cmp.Cost() <= GuardCostLimit && cmp.Off.Errors == 0 && cmp.On.Errors == 0
			lo, hi := quartiles(cmp.PairCosts())
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.0f | %s | %s | %.1f%% to %.1f%% | %.1f%% | ≤ 15%% | %s |\n", cmp.Scenario,
				cmp.Off.RPS, ms(cmp.Off.P50), ms(cmp.Off.P99), cmp.On.RPS, ms(cmp.On.P50), ms(cmp.On.P99),
				100*lo, 100*hi, 100*cmp.Cost(), passFail(pass))
		}
	}
	r.sealMarkdown(w)
	if r.RSSPeak > 0 {
		fmt.Fprintf(w, "\nPeak RSS: %.0f MB, %s; target < 150 MB: %s.", float64(r.RSSPeak)/(1<<20), r.RSSOfWhat,
			passFail(r.RSSPeak < RSSLimit))
		if r.PeerRSS > 0 {
			fmt.Fprintf(w, " PostGraphile's node: %.0f MB.", float64(r.PeerRSS)/(1<<20))
		}
		fmt.Fprintf(w, "\n")
	}
	var errs []string
	for _, res := range r.Results {
		if res.Unavailable != "" {
			errs = append(errs, fmt.Sprintf("%s could not run: %s", res.Scenario, res.Unavailable))
		}
		for _, row := range res.Rows {
			if row.Errors > 0 {
				errs = append(errs, fmt.Sprintf("%s, %s: %d failed, first: %s", res.Scenario, row.Contender, row.Errors, row.FirstError))
			}
		}
	}
	for _, cmp := range r.Comparisons {
		for _, s := range []Stats{cmp.Off, cmp.On} {
			if s.Errors > 0 {
				errs = append(errs, fmt.Sprintf("%s compare: %d errors, first: %s", cmp.Scenario, s.Errors, s.FirstError))
			}
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\nErrors:\n")
		for _, e := range errs {
			fmt.Fprintf(w, "- %s\n", e)
		}
	}
}

// Statements writes the statements of each scenario: those TaskFlow's
// request ran (the replay runs them) and the raw SQL contender's.
func (r *Report) Statements(w io.Writer) {
	for _, res := range r.Results {
		fmt.Fprintf(w, "%s, TaskFlow (%d statements):\n", res.Scenario, len(res.Statements))
		for _, s := range res.Statements {
			fmt.Fprintf(w, "  %.150s\n", s)
		}
		fmt.Fprintf(w, "%s, raw SQL (one round trip):\n", res.Scenario)
		for _, s := range res.RawSQL {
			fmt.Fprintf(w, "  %s\n", oneLine(s))
		}
	}
}

// result returns the result of scenario, nil if it did not run.
func (r *Report) result(scenario string) *Result {
	for i := range r.Results {
		if r.Results[i].Scenario == scenario {
			return &r.Results[i]
		}
	}
	return nil
}

// Valid reports whether every answer of the run was a success (a run with a
// failed request measured something else than the work).
func (r *Report) Valid() bool {
	for _, res := range r.Results {
		if !res.Valid() {
			return false
		}
	}
	for _, c := range r.Comparisons {
		if c.Off.Errors+c.On.Errors > 0 {
			return false
		}
	}
	return true
}

// Passed reports whether every target was met.
func (r *Report) Passed() bool {
	for _, res := range r.Results {
		if !res.Pass() {
			return false
		}
	}
	for _, c := range r.Comparisons {
		if c.Cost() > GuardCostLimit {
			return false
		}
	}
	return r.RSSPeak < RSSLimit
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// us formats a CPU time per request in µs; — when not measured.
func us(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// ratio formats contender's throughput over other's; — for itself or when
// either did not run.
func ratio(res Result, contender, other string) string {
	x := res.Ratio(contender, other)
	if contender == other || x == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", x)
}

// spread formats the least and the greatest of a ratio's rounds, so that a
// reader sees how far the machine moved it within the run; "" for fewer than
// two rounds.
func spread(rounds []float64) string {
	if len(rounds) < 2 {
		return ""
	}
	return fmt.Sprintf(" (rounds %.2fx to %.2fx)", slices.Min(rounds), slices.Max(rounds))
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}
