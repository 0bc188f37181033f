package loadgen

import (
	"fmt"
	"io"
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
	mode := "in-process server (real HTTP on loopback)"
	if c.Exec {
		mode = "server binary as a subprocess (real HTTP on loopback)"
	}
	fmt.Fprintf(w, "Run of %s: concurrency %d, %s per run, %s; GOMAXPROCS %d, pool max %d connections; load average %s.\n\n",
		r.Started.UTC().Format(time.RFC3339), c.Concurrency, c.Duration, mode, r.GoMaxProcs, r.PoolConns, r.LoadAvg)
	fmt.Fprintf(w, "| scenario | server rps | p50 | p95 | p99 | raw-SQL rps | raw p50 | raw p99 | ratio | target | pass |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, res := range r.Results {
		target := "—"
		if res.Target > 0 {
			target = fmt.Sprintf("≥ %.1fx", res.Target)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.0f | %s | %s | %.2fx | %s | %s |\n",
			res.Scenario, res.Server.RPS, ms(res.Server.P50), ms(res.Server.P95), ms(res.Server.P99),
			res.Raw.RPS, ms(res.Raw.P50), ms(res.Raw.P99), res.Ratio, target, passFail(res.Pass()))
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
		fmt.Fprintf(w, "\nPeak RSS: %.0f MB, %s; target < 150 MB: %s.\n", float64(r.RSSPeak)/(1<<20), r.RSSOfWhat,
			passFail(r.RSSPeak < RSSLimit))
	}
	var errs []string
	for _, res := range r.Results {
		if res.Unavailable != "" {
			errs = append(errs, fmt.Sprintf("%s could not run: %s", res.Scenario, res.Unavailable))
		}
		if res.Server.Errors > 0 {
			errs = append(errs, fmt.Sprintf("%s server: %d errors, first: %s", res.Scenario, res.Server.Errors, res.Server.FirstError))
		}
		if res.Raw.Errors > 0 {
			errs = append(errs, fmt.Sprintf("%s raw: %d errors, first: %s", res.Scenario, res.Raw.Errors, res.Raw.FirstError))
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

// Statements writes the statements each scenario's request ran (the raw-SQL
// baseline replays them).
func (r *Report) Statements(w io.Writer) {
	for _, res := range r.Results {
		fmt.Fprintf(w, "%s (%d statements):\n", res.Scenario, len(res.Statements))
		for _, s := range res.Statements {
			fmt.Fprintf(w, "  %.150s\n", s)
		}
	}
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

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}
