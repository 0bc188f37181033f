package loadgen

import (
	"strings"
	"testing"
	"time"
)

// A scenario passes when TaskFlow reaches both of its targets: against raw SQL
// always, against PostGraphile only when PostGraphile ran (-peer=false leaves
// it unchecked).
func TestResultTargets(t *testing.T) {
	t.Parallel()
	rows := func(tf, raw, peer float64) []Row {
		rs := []Row{{Contender: TaskFlow, Stats: Stats{RPS: tf}}, {Contender: RawSQL, Stats: Stats{RPS: raw}}}
		if peer > 0 {
			rs = append(rs, Row{Contender: PostGraphile, Stats: Stats{RPS: peer}})
		}
		return rs
	}
	for _, c := range []struct {
		name         string
		target, peer float64
		rows         []Row
		want         bool
	}{
		{"no targets", 0, 0, rows(1, 10, 5), true},
		{"raw met, peer met", 0.25, 3, rows(3, 10, 1), true},
		{"raw missed", 0.25, 3, rows(2, 10, 0.5), false},
		{"peer missed", 0.25, 3, rows(3, 10, 1.5), false},
		{"peer not run", 0.25, 3, rows(3, 10, 0), true},
		{"failed answers", 0, 0, []Row{{Contender: TaskFlow, Stats: Stats{RPS: 1, Errors: 1}}}, false},
	} {
		r := Result{Scenario: "s", Rows: c.rows, Target: c.target, PeerTarget: c.peer}
		if got := r.Pass(); got != c.want {
			t.Errorf("%s: Pass() = %v, want %v", c.name, got, c.want)
		}
	}
}

// The CPU targets compare TaskFlow's CPU per request with PostGraphile's,
// server with server and Postgres with Postgres, and are not checked where a
// CPU was not measured.
func TestResultCPUTargets(t *testing.T) {
	t.Parallel()
	row := func(who string, server, postgres time.Duration) Row {
		return Row{Contender: who, Stats: Stats{RPS: 1, Requests: 1000, ServerCPU: server * 1000, PostgresCPU: postgres * 1000}}
	}
	target := CPUTarget{Server: 1, Postgres: 1.5}
	for _, c := range []struct {
		name string
		rows []Row
		want bool
	}{
		{"both within", []Row{row(TaskFlow, 300*time.Microsecond, 150*time.Microsecond), row(PostGraphile, 700*time.Microsecond, 100*time.Microsecond)}, true},
		{"server over", []Row{row(TaskFlow, 800*time.Microsecond, 100*time.Microsecond), row(PostGraphile, 700*time.Microsecond, 100*time.Microsecond)}, false},
		{"postgres over", []Row{row(TaskFlow, 300*time.Microsecond, 160*time.Microsecond), row(PostGraphile, 700*time.Microsecond, 100*time.Microsecond)}, false},
		{"server not measured", []Row{row(TaskFlow, -1, 100*time.Microsecond), row(PostGraphile, 700*time.Microsecond, 100*time.Microsecond)}, true},
		{"no PostGraphile", []Row{row(TaskFlow, 900*time.Microsecond, 900*time.Microsecond)}, true},
	} {
		r := Result{Scenario: "s", Rows: c.rows, CPU: target}
		if got := r.Pass(); got != c.want {
			s, p := r.CPURatios()
			t.Errorf("%s: Pass() = %v, want %v (ratios %.2f, %.2f)", c.name, got, c.want, s, p)
		}
	}
}

// A run whose server binary got variables of its own (-server-env) says so in
// its header line, so that a table measured with GOMAXPROCS=1 is not read as
// the server's defaults.
func TestReportNamesServerEnv(t *testing.T) {
	t.Parallel()
	header := func(c Config) string {
		var b strings.Builder
		(&Report{Config: c}).Markdown(&b)
		first, _, _ := strings.Cut(b.String(), "\n")
		return first
	}
	if h := header(Config{Exec: true, ServerEnv: []string{"GOMAXPROCS=1", "GOGC=100"}}); !strings.Contains(h, "its environment adds GOMAXPROCS=1 GOGC=100") {
		t.Errorf("header without the server's variables: %s", h)
	}
	if h := header(Config{Exec: true}); strings.Contains(h, "environment adds") {
		t.Errorf("header names variables that were not set: %s", h)
	}
}
