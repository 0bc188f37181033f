package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"taskflow/store/storetest"
)

// TestAbuseSmoke runs one tiny round of every attack against the real server
// binary, so that the harness keeps working as the server changes. It checks
// that each attack ran and was answered, not how fast (speed is what the
// harness itself reports).
func TestAbuseSmoke(t *testing.T) {
	t.Parallel()
	rep, err := Run(t.Context(), Config{
		DatabaseURL: storetest.URL(t),
		RedisURL:    "redis://127.0.0.1:6379/0",
		Duration:    time.Millisecond, Attackers: 1, Scale: 0.01, Documents: 2, Registers: 2,
		SlowConns: 2, IdleConns: 2, IdleWebSockets: 2, SlowFor: 500 * time.Millisecond,
		Idle: 300 * time.Millisecond, Settle: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(attacks) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(attacks))
	}
	if rep.VictimIdle.N == 0 || rep.VictimIdle.Errors != 0 {
		t.Fatalf("victim alone: %+v", rep.VictimIdle)
	}
	for _, row := range rep.Rows {
		if row.Err != "" || row.Requests == 0 || len(row.Answers) == 0 || row.RSSPeak == 0 {
			t.Errorf("%s: %+v", row.Attack, row)
		}
		if row.Answers["error"] > 0 {
			t.Errorf("%s: transport errors: %v", row.Attack, row.Answers)
		}
		// The attacks send documents the server can read: a parse failure
		// means the harness built a body wrong, and measured nothing.
		for answer := range row.Answers {
			if strings.Contains(answer, "PARSE_FAILED") {
				t.Errorf("%s: %v", row.Attack, row.Answers)
			}
		}
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	for _, a := range attacks {
		if !strings.Contains(b.String(), "| "+a.name+": ") {
			t.Errorf("the report has no row %s:\n%s", a.name, b.String())
		}
	}
}
