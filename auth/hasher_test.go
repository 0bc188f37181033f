package auth

import (
	"context"
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"taskflow/cpumeter"
	"taskflow/errs"
)

// metricValue returns the value of a gauge or counter.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// waitFor polls until cond holds, for at most the time the test binary has
// left (a safety net, not a timed assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if d, ok := t.Deadline(); ok && time.Until(d) < 5*time.Second {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// hold takes the whole bound of h until the returned release is called.
func hold(t *testing.T, h *Hasher) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	go func() {
		if err := h.Run(context.Background(), math.MaxUint32, func() { close(held); <-done }); err != nil {
			t.Error(err)
			close(held)
		}
	}()
	<-held
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	t.Cleanup(release)
	return release
}

// Of 10 concurrent runs, never more than MaxConcurrent are inside at once;
// the others wait in line and all run once there is room.
func TestHasherBoundsConcurrentRuns(t *testing.T) {
	t.Parallel()
	h := NewHasher(HasherOptions{Params: FastPasswordParams, MaxConcurrent: 3, Wait: time.Hour})
	var inside, most atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			err := h.Run(context.Background(), FastPasswordParams.Memory, func() {
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				inside.Add(-1)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "3 in flight and 7 waiting", func() bool {
		if n := most.Load(); n > 3 {
			t.Fatalf("%d runs at once, want 3", n)
		}
		return metricValue(t, h.metrics.inFlight) == 3 && metricValue(t, h.metrics.waiting) == 7
	})
	if got := most.Load(); got != 3 {
		t.Fatalf("%d runs at once, want 3", got)
	}
	close(release)
	wg.Wait()
	if most.Load() != 3 || metricValue(t, h.metrics.ok) != 10 || metricValue(t, h.metrics.inFlight) != 0 {
		t.Fatalf("most %d, ok %v, in flight %v", most.Load(), metricValue(t, h.metrics.ok), metricValue(t, h.metrics.inFlight))
	}
}

// A hash that finds no room within Wait (or whose request ends first) is
// refused with the retryable RATE_LIMITED error and hashes nothing.
func TestHasherBusyAfterWait(t *testing.T) {
	t.Parallel()
	h := NewHasher(HasherOptions{Params: FastPasswordParams, MaxConcurrent: 1, Wait: 10 * time.Millisecond})
	release := hold(t, h)
	wantBusy := func(what string, err error) {
		t.Helper()
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != errs.CodeRateLimited || e.Extensions["retryAfter"] != 1 {
			t.Fatalf("%s: %#v, want RATE_LIMITED with retryAfter 1", what, err)
		}
	}
	_, err := h.Hash(context.Background(), "correct horse")
	wantBusy("hash", err)
	_, err = h.Verify(context.Background(), "correct horse", h.dummy)
	wantBusy("verify", err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.Hash(ctx, "correct horse")
	wantBusy("hash of an ended request", err)
	if got := metricValue(t, h.metrics.busy); got != 3 {
		t.Fatalf("busy = %v, want 3", got)
	}
	release()
	hash, err := h.Hash(context.Background(), "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Verify(context.Background(), "correct horse", hash); !ok || err != nil {
		t.Fatalf("verify: %v %v", ok, err)
	}
}

// A hash weighs the memory of its own parameters: verifying a hash made with
// more memory than the bound takes all of it, and waits while any is held.
func TestHasherWeighsHashesByMemory(t *testing.T) {
	t.Parallel()
	h := NewHasher(HasherOptions{Params: FastPasswordParams, MaxConcurrent: 2, Wait: 10 * time.Millisecond})
	big := HashPassword("correct horse", PasswordParams{Memory: 1024, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32})
	held, done := make(chan struct{}), make(chan struct{})
	go func() { _ = h.Run(context.Background(), FastPasswordParams.Memory, func() { close(held); <-done }) }()
	<-held
	if _, err := h.Verify(context.Background(), "correct horse", big); errs.CodeOf(err) != errs.CodeRateLimited {
		t.Fatalf("verify of a big hash beside a small one: %v", err)
	}
	if _, err := h.Hash(context.Background(), "correct horse"); err != nil {
		t.Fatalf("a second small hash: %v", err)
	}
	close(done)
	if ok, err := h.Verify(context.Background(), "correct horse", big); !ok || err != nil {
		t.Fatalf("verify of a big hash alone: %v %v", ok, err)
	}
}

// The dummy hash has the hasher's parameters (a verification against it
// costs what a real one does) and matches nothing.
func TestHasherDummyHash(t *testing.T) {
	t.Parallel()
	h := NewHasher(HasherOptions{Params: FastPasswordParams})
	if NeedsRehash(h.dummy, FastPasswordParams) {
		t.Fatalf("dummy %q does not have the hasher's parameters", h.dummy)
	}
	for _, p := range []string{"", "taskflow dummy password", "correct horse"} {
		if ok, err := h.Verify(context.Background(), p, h.dummy); ok || err != nil {
			t.Fatalf("dummy verifies %q: %v %v", p, ok, err)
		}
	}
	if NewHasher(HasherOptions{Params: FastPasswordParams}).dummy == h.dummy {
		t.Fatal("two hashers share a dummy hash")
	}
}

// The default bound follows the CPUs and the memory limit.
func TestDefaultMaxConcurrent(t *testing.T) {
	if got := DefaultMaxConcurrent(DefaultPasswordParams); got < 1 {
		t.Fatalf("DefaultMaxConcurrent = %d", got)
	}
	// Not parallel: it changes the process's memory limit for a moment.
	old := debug.SetMemoryLimit(100 << 20)
	defer debug.SetMemoryLimit(old)
	if got := DefaultMaxConcurrent(DefaultPasswordParams); got != 1 {
		t.Fatalf("with a 100 MiB memory limit: %d hashes of 19 MiB, want 1 (a quarter of the limit)", got)
	}
	debug.SetMemoryLimit(1 << 30)
	if got, want := DefaultMaxConcurrent(PasswordParams{Memory: 1024, Threads: 1}), max(min(runtime.GOMAXPROCS(0)/2, 256), 1); got != want {
		t.Fatalf("with a 1 GiB limit and 1 MiB hashes: %d, want %d", got, want)
	}
}

// Hash memory is garbage once a hash ends: the hasher collects once
// hashGarbageKiB of it have piled up, not at every hash.
func TestHasherCollectsHashGarbage(t *testing.T) {
	t.Parallel()
	h := NewHasher(HasherOptions{Params: FastPasswordParams})
	per := int64(DefaultPasswordParams.Memory)
	var started []int
	for i := 1; i <= 10; i++ {
		if h.discarded(per) {
			started = append(started, i)
		}
	}
	// 19 MiB a hash: every other one (38 MiB) collects.
	if !slices.Equal(started, []int{2, 4, 6, 8, 10}) {
		t.Fatalf("collections after hashes %v, want [2 4 6 8 10]", started)
	}
	// Run counts what it held.
	before := h.garbage.Load()
	if err := h.Run(t.Context(), 1, func() {}); err != nil {
		t.Fatal(err)
	}
	if got := h.garbage.Load(); got != before+1 {
		t.Fatalf("garbage after a 1 KiB run: %d KiB, want %d", got, before+1)
	}
}

// A hash is charged to its caller's turn (package cpumeter) its time, but at
// most twice the fastest hash of the hasher's parameters: a slow hash on a
// busy machine is charged what a hash costs. Hashes of other sizes are
// charged their time; Run reports its charge to the context's Meter.
func TestHasherChargesAtMostTwiceTheFastestHash(t *testing.T) {
	t.Parallel()
	h := NewHasher(HasherOptions{Params: FastPasswordParams})
	own := int64(FastPasswordParams.Memory)
	for _, c := range []struct {
		kib        int64
		took, want time.Duration
	}{
		{own, 100 * time.Millisecond, 100 * time.Millisecond}, // the first is the fastest
		{own, 30 * time.Millisecond, 30 * time.Millisecond},   // a faster one
		{own, 500 * time.Millisecond, 60 * time.Millisecond},  // slow: twice the fastest
		{own, 50 * time.Millisecond, 50 * time.Millisecond},
		{2 * own, time.Second, time.Second}, // another size: its time
	} {
		if got := h.charge(c.kib, c.took); got != c.want {
			t.Fatalf("a hash of %d KiB that took %s is charged %s, want %s", c.kib, c.took, got, c.want)
		}
	}
	ctx, m := cpumeter.With(context.Background())
	if _, err := h.Hash(ctx, "correct horse"); err != nil {
		t.Fatal(err)
	}
	if m.Spent() <= 0 || m.Spent() > 60*time.Millisecond {
		t.Fatalf("a hash charged %s to its request, want more than 0 and at most 60ms", m.Spent())
	}
}
