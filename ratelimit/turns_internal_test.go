package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
	endB(0)
	// The same caller waits for its turn.
	got := make(chan EndTurn, 1)
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
	endA(0)
	(<-got)(0)

	// Too many waiting: refused at once with RATE_LIMITED.
	endA, _ = tr.enter(ctx, "a")
	waiting, cancel := context.WithCancel(ctx)
	done := make(chan error, MaxWaitingTurns)
	for range MaxWaitingTurns {
		go func() {
			end, err := tr.enter(waiting, "a")
			if end != nil {
				end(0)
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
	endA(0)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.callers) != 0 {
		t.Fatalf("callers left behind: %v", tr.callers)
	}
}

// A caller's turns are paced: their work is paid for at TurnShare of a core
// past a burst of TurnBurst; a
// turn waits for it, or is refused with the wait as retryAfter past
// MaxTurnPace; other callers do not wait; paid-for entries are swept.
func TestTurnsArePaced(t *testing.T) {
	t.Parallel()
	var tr turns
	now := time.Now()
	tolerance := time.Duration(float64(TurnBurst) / TurnShare)

	// Within the burst: no wait.
	tr.charge("a", now, TurnBurst/2)
	if w := tr.pace("a", now); w > 0 {
		t.Fatalf("half a burst: wait %s", w)
	}
	// The whole burst and as much again: a wait of what it takes to pay for
	// the rest at TurnShare.
	tr.charge("a", now, TurnBurst/2+TurnBurst)
	if w, want := tr.pace("a", now), time.Duration(float64(TurnBurst)/TurnShare); w != want {
		t.Fatalf("two bursts: wait %s, want %s", w, want)
	}
	// Later, it is paid for.
	if w := tr.pace("a", now.Add(2*tolerance)); w > 0 {
		t.Fatalf("after the wait: %s", w)
	}
	if w := tr.pace("b", now); w > 0 {
		t.Fatalf("another caller waits %s", w)
	}

	// Through enter: a turn is charged its work, not its length.
	end, err := tr.enter(t.Context(), "c")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	end(0)
	tr.mu.Lock()
	_, charged := tr.paid["c"]
	tr.mu.Unlock()
	if charged {
		t.Fatal("a turn with no work was charged")
	}
	end, err = tr.enter(t.Context(), "c")
	if err != nil {
		t.Fatal(err)
	}
	end(time.Millisecond)
	tr.mu.Lock()
	at := tr.paid["c"]
	tr.mu.Unlock()
	if !at.After(time.Now()) {
		t.Fatal("a turn was not charged")
	}

	// A debt past MaxTurnPace is refused at once, retryAfter the wait.
	tr.charge("d", time.Now(), 2*TurnBurst+MaxTurnPace)
	_, err = tr.enter(t.Context(), "d")
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeRateLimited {
		t.Fatalf("a debt past MaxTurnPace: %v", err)
	}
	if ra, _ := e.Extensions["retryAfter"].(int); ra < int(MaxTurnPace/time.Second) {
		t.Fatalf("retryAfter %v, want at least %d", e.Extensions["retryAfter"], int(MaxTurnPace/time.Second))
	}
	// A shorter debt waits; a request that goes away while it waits leaves
	// its turn to the next.
	tr.charge("e", time.Now(), 2*TurnBurst)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := tr.enter(ctx, "e"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a request that went away during its wait: %v", err)
	}
	tr.mu.Lock()
	_, left := tr.callers["e"]
	tr.mu.Unlock()
	if left {
		t.Fatal("a request that went away during its wait left its caller behind")
	}

	// Entries in the past are swept once the map doubles.
	past := time.Now().Add(-time.Hour)
	for i := range 200 {
		tr.charge(fmt.Sprint("past", i), past, time.Millisecond)
	}
	for i := range 1000 {
		tr.charge(fmt.Sprint("now", i), time.Now(), time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for k := range tr.paid {
		if strings.HasPrefix(k, "past") {
			t.Fatalf("%s, paid for an hour ago, is kept (%d entries)", k, len(tr.paid))
		}
	}
}
