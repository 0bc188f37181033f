package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Markdown writes the report: the machine, the victim's idle latency, a row
// per attack and the server's RSS after the run.
func (r *Report) Markdown(w io.Writer) {
	fmt.Fprintf(w, "### Abuse run of %s\n\n", r.Started.Format("2006-01-02 15:04"))
	fmt.Fprintf(w, "Machine: %s, load average %s. Server environment: %s. Flooding attacks: %d in flight for %s each.\n\n",
		r.Machine, r.LoadAvg, serverEnv(r.Config.ServerEnv), r.Config.Attackers, r.Config.Duration)
	fmt.Fprintf(w, "Victim: a signed-in task(id) every %s; alone: p50 %s, p99 %s (%d requests, server CPU %s each).\n\n",
		r.Config.VictimEvery, ms(r.VictimIdle.P50), ms(r.VictimIdle.P99), r.VictimIdle.N, ms(r.VictimCPU))
	fmt.Fprintln(w, "| attack | requests | answers | server CPU / request | peak RSS | victim p99 (× idle), requests | verdict |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---|")
	for _, row := range r.Rows {
		cpu := "—"
		if row.CPU > 0 || row.CPUBound > 0 {
			cpu = ms(row.CPU)
		}
		ratio := 0.0
		if r.VictimIdle.P99 > 0 {
			ratio = float64(row.Victim.P99) / float64(r.VictimIdle.P99)
		}
		verdict := "pass"
		if !row.Pass(r.VictimIdle) {
			verdict = "**fail**: " + strings.Join(row.failures(r.VictimIdle), ", ")
		}
		fmt.Fprintf(w, "| %s: %s | %d | %s | %s | %s | %s (%.1f×), %d | %s |\n", row.Attack, row.What, row.Requests,
			answers(row.Answers), cpu, mib(row.RSSPeak), ms(row.Victim.P99), ratio, row.Victim.N, verdict)
	}
	fmt.Fprintln(w)
	for _, row := range r.Rows {
		if row.Err != "" {
			fmt.Fprintf(w, "- %s could not run: %s\n", row.Attack, row.Err)
		}
		for _, n := range row.Notes {
			fmt.Fprintf(w, "- %s: %s\n", row.Attack, n)
		}
	}
	if r.SettledAfter != "" {
		fmt.Fprintf(w, "\nServer RSS after the document and memory attacks: peak (VmHWM) %s (bound %s: %s); %s when %s ended, %s %s later (bound %s: %s).\n",
			mib(r.HWMBefore), mib(rssBound), passFail(r.HWMBefore < rssBound), mib(r.RSSAfter), r.SettledAfter,
			mib(r.RSSSettled), r.Settle, mib(rssSettledBound), passFail(r.RSSSettled < rssSettledBound))
	}
	fmt.Fprintf(w, "\nServer peak RSS over the whole run (VmHWM, register's argon2id included): %s.\n", mib(r.HWM))
}

// failures names the bounds a row broke.
func (r Row) failures(idle Latency) []string {
	var f []string
	if r.Err != "" {
		f = append(f, "did not run")
	}
	if r.Victim.Errors > 0 {
		f = append(f, fmt.Sprintf("%d victim errors", r.Victim.Errors))
	}
	if r.Victim.P99 >= victimFactor*max(idle.P99, time.Millisecond) {
		f = append(f, "victim p99")
	}
	if r.RSSPeak >= rssBound {
		f = append(f, "RSS")
	}
	if r.CPUBound > 0 && r.CPU > r.CPUBound {
		f = append(f, "CPU")
	}
	return f
}

// answers lists the answers, most frequent first.
func answers(a map[string]int) string {
	keys := slices.Collect(maps.Keys(a))
	slices.SortFunc(keys, func(x, y string) int {
		if a[x] != a[y] {
			return a[y] - a[x]
		}
		return strings.Compare(x, y)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, a[k])
	}
	return strings.Join(parts, ", ")
}

func serverEnv(env []string) string {
	if len(env) == 0 {
		return "defaults (GOGC=200 set by the server, no GOMEMLIMIT)"
	}
	return strings.Join(env, " ")
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "**fail**"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
