package httpapi_test

import (
	"testing"
	"time"
)

// eventually polls cond until it holds, and fails t with what when it has
// not within within, or 5 s before the test binary's deadline, whichever
// comes first (so the failure names the wait rather than the binary
// panicking with every goroutine). A readiness poll, not a timing
// assertion: give it minutes, as CI runs the tests under -race on 2 cores.
// It pauses 5 ms between tries, doubling up to 100 ms, so that a long wait
// does not load the server it polls.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	if d, ok := t.Deadline(); ok && d.Add(-5*time.Second).Before(deadline) {
		deadline = d.Add(-5 * time.Second)
	}
	for pause := 5 * time.Millisecond; !cond(); pause = min(2*pause, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(pause)
	}
}
