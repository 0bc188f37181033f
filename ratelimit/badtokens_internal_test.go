package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"taskflow/reqinfo"
)

// The networks an instance refuses for bad tokens are at most as many as
// its bound: the expired are dropped first, then the one refused for the
// least time; a network refused is answered until its time, and forgotten
// after.
func TestBlockListIsBounded(t *testing.T) {
	t.Parallel()
	b := newBlockList(100)
	now := time.Now()
	for i := range 50 {
		b.add("expired-"+strconv.Itoa(i), now.Add(-time.Second))
	}
	for i := range 1000 {
		b.add("net-"+strconv.Itoa(i), now.Add(time.Hour+time.Duration(i)*time.Second))
		if n := b.len(); n > 100 {
			t.Fatalf("%d networks after %d added (bound 100)", n, 50+i+1)
		}
	}
	if _, ok := b.get("net-999", now); !ok {
		t.Fatal("the last network refused is not")
	}
	if _, ok := b.get("net-0", now); ok {
		t.Fatal("the network refused for the least time was kept over the bound")
	}
	if retry, ok := b.get("net-999", now.Add(time.Hour)); !ok || retry != 999*time.Second {
		t.Fatalf("get = %v %v", retry, ok)
	}
	if _, ok := b.get("net-999", now.Add(2*time.Hour)); ok || b.len() != 99 {
		t.Fatalf("an expired network is still refused (%v) or kept (%d)", ok, b.len())
	}
}

// commands counts the commands a Redis client sends.
type commands struct{ n atomic.Int64 }

func (*commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// Once a network's charge is refused, the instance refuses it from memory
// until the retry time: no Redis command; other networks are not refused.
func TestTokenGuardRefusesFromMemory(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	sent := &commands{}
	rdb.AddHook(sent)
	l, err := New(Options{Config: Config{BadTokenPerIP: Limit{Points: 2, Window: time.Hour}}, Redis: rdb,
		KeyPrefix: "test:" + uuid.NewString() + ":"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	g := l.TokenGuard()
	ctx := reqinfo.With(t.Context(), reqinfo.Info{IP: "2001:db8:1:2::7"})
	for i := range 2 {
		if _, refused := g.Failed(ctx); refused {
			t.Fatalf("charge %d refused", i)
		}
	}
	if _, blocked := g.Blocked(ctx); blocked {
		t.Fatal("blocked within the budget")
	}
	retry, refused := g.Failed(ctx)
	if !refused || retry < 29*time.Minute || retry > 30*time.Minute {
		t.Fatalf("third charge: %v %v", retry, refused)
	}
	before := sent.n.Load()
	if before == 0 {
		t.Fatal("the charges sent no Redis command")
	}
	// The same /64, another address in it.
	same := reqinfo.With(t.Context(), reqinfo.Info{IP: "2001:db8:1:2::8"})
	for range 100 {
		if retry, blocked := g.Blocked(same); !blocked || retry <= 0 {
			t.Fatalf("Blocked = %v %v", retry, blocked)
		}
	}
	if _, blocked := g.Blocked(reqinfo.With(t.Context(), reqinfo.Info{IP: "2001:db8:1:3::7"})); blocked {
		t.Fatal("another network is blocked")
	}
	if n := sent.n.Load() - before; n != 0 {
		t.Fatalf("%d Redis commands while blocked", n)
	}
}
