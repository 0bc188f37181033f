package cpumeter_test

import (
	"context"
	"testing"
	"time"

	"taskflow/cpumeter"
)

// Sections and additions reach the Meter of their context; without one they
// are no-ops.
func TestMeter(t *testing.T) {
	t.Parallel()
	ctx, m := cpumeter.With(context.Background())
	cpumeter.Add(ctx, 3*time.Millisecond)
	cpumeter.Add(ctx, -time.Second) // nothing
	stop := cpumeter.Start(ctx)
	time.Sleep(2 * time.Millisecond)
	stop()
	if got := m.Spent(); got < 5*time.Millisecond {
		t.Fatalf("spent %s, want at least 5ms", got)
	}
	cpumeter.Add(context.Background(), time.Second)
	cpumeter.Start(context.Background())()
}
