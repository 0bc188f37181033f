package live_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"taskflow/live"
	"taskflow/ratelimit/ratelimittest"
	"taskflow/store"
)

// publishCounter is a go-redis hook that counts the PUBLISH commands its
// client sends.
type publishCounter struct{ n atomic.Int64 }

func (*publishCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *publishCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "publish" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (*publishCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Two instances (A and B: a store and a hub each, on one database and a
// private Redis, both polling only once an hour): while no one has a
// subscriber, B's commits publish about one wake-up a second, not one each;
// once A has a subscriber, B's commits reach it, which only a wake-up can
// bring.
func TestWakeupsOnlyWhileSomeoneListens(t *testing.T) {
	t.Parallel()
	rds := ratelimittest.StartRedis(t)
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: rds.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := setup(t, live.Options{Poll: time.Hour, Redis: client()})
	pool, err := pgxpool.New(t.Context(), a.db.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	dbB := store.New(pool, nil)
	rB, published := client(), &publishCounter{}
	rB.AddHook(published)
	hubB := live.New(live.Options{DB: dbB, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour, Redis: rB})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hubB.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	createB := func(title string) {
		t.Helper()
		if err := dbB.UnitOfWork(t.Context(), func(ctx context.Context) error {
			_, err := dbB.CreateTask(ctx, a.user, store.NewTask{ProjectID: a.project, Title: title})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	const commits = 60
	for i := range commits {
		createB("unheard " + strconv.Itoa(i))
		time.Sleep(2 * time.Millisecond) // each commit's publish ends before the next
	}
	elapsed := time.Since(start)
	// One publish finds no receiver, then one a second at most (and one in
	// flight at the end).
	if n, most := published.n.Load(), 2+int64(elapsed/time.Second); n > most {
		t.Fatalf("%d commits in %v with no instance listening published %d wake-ups, want at most %d",
			commits, elapsed.Round(time.Millisecond), n, most)
	}

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	events, _ := a.subscribe(t, ctx, "")
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case ev := <-events:
			if ev == nil {
				t.Fatal("A's subscription ended")
			}
			return // delivered: A heard B's wake-up
		case <-tick.C:
			createB("heard " + strconv.Itoa(i))
		case <-deadline:
			t.Fatalf("none of B's %d commits after A's subscription reached A (A polls once an hour)", i)
		}
	}
}
