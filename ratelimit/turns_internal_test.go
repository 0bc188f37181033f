package ratelimit

import (
	"context"
	"errors"
	"testing"

	"taskflow/errs"
)

// One caller's requests take turns; other callers do not wait for them; a
// caller with too many waiting is refused at once; a request whose context ends
// while it waits leaves nothing behind.
func TestTurns(t *testing.T) {
	t.Parallel()
	var tr turns
	ctx := t.Context()
	endA, err := tr.enter(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another caller goes at once.
	endB, err := tr.enter(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	endB()
	// The same caller waits for its turn.
	got := make(chan func(), 1)
	go func() {
		end, err := tr.enter(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- end
	}()
	select {
	case <-got:
		t.Fatal("a second request of a caller got its turn while the first had it")
	default:
	}
	endA()
	(<-got)()

	// Too many waiting: refused at once with RATE_LIMITED.
	endA, _ = tr.enter(ctx, "a")
	waiting, cancel := context.WithCancel(ctx)
	done := make(chan error, MaxWaitingTurns)
	for range MaxWaitingTurns {
		go func() {
			end, err := tr.enter(waiting, "a")
			if end != nil {
				end()
			}
			done <- err
		}()
	}
	for {
		tr.mu.Lock()
		n := tr.callers["a"].users
		tr.mu.Unlock()
		if n == MaxWaitingTurns+1 {
			break
		}
	}
	if _, err := tr.enter(ctx, "a"); errs.CodeOf(err) != errs.CodeRateLimited {
		t.Fatalf("a request past MaxWaitingTurns: %v", err)
	}
	cancel()
	for range MaxWaitingTurns {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiting request whose context ended: %v", err)
		}
	}
	endA()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.callers) != 0 {
		t.Fatalf("callers left behind: %v", tr.callers)
	}
}
