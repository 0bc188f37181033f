package loadgen

import "testing"

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
