package store

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// A spine consumer runs a round again at once after a full one and waits at
// least its gap after one that found events, however often it is woken: under
// a write load, a round takes the events of many commits.
func TestSpineConsumerWaitsItsGapAfterEvents(t *testing.T) {
	t.Parallel()
	db := &DB{log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wake := make(chan struct{}, 1)
	go func() { // a unit of work commits every millisecond
		for ctx.Err() == nil {
			select {
			case wake <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		}
	}()
	const gap = 40 * time.Millisecond
	rounds := []struct{ found, full bool }{{true, true}, {true, false}, {true, false}, {false, false}, {true, false}, {false, false}}
	var at []time.Time
	RunSpineConsumer(ctx, db, "test", wake, time.Hour, gap, func(context.Context) (bool, bool, error) {
		at = append(at, time.Now())
		r := rounds[len(at)-1]
		if len(at) == len(rounds) {
			cancel()
		}
		return r.found, r.full, nil
	})
	if len(at) != len(rounds) {
		t.Fatalf("%d rounds, want %d", len(at), len(rounds))
	}
	for i := 1; i < len(at); i++ {
		if rounds[i-1].found && !rounds[i-1].full && at[i].Sub(at[i-1]) < gap {
			t.Errorf("round %d came %v after round %d, which found events: want at least the gap, %v",
				i+1, at[i].Sub(at[i-1]), i, gap)
		}
	}
}
