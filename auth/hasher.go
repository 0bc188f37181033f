package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/argon2"
	"golang.org/x/sync/semaphore"

	"taskflow/cpumeter"
	"taskflow/errs"
	"taskflow/promreg"
)

// DefaultHashWait is how long a password hash waits for room under a
// Hasher's bound before its request is refused as busy: about 35 hashes of
// the default parameters on two cores (28 ms each, one at a time), far more
// than a burst of honest sign-ins, and short enough to answer a flood quickly.
const DefaultHashWait = time.Second

// HashRetryAfter is the retryAfter, in seconds, of the busy error: a hash
// takes tens of milliseconds, so room comes back within a second.
const HashRetryAfter = 1

// ErrHashingBusy returns the error of a request whose password hash found no
// room under the bound in time: RATE_LIMITED with extensions.retryAfter, which
// the transport answers with HTTP 429 and Retry-After. Nothing was done; the
// same request can be sent again after retryAfter seconds.
func ErrHashingBusy() *errs.Error {
	return &errs.Error{Code: errs.CodeRateLimited,
		Message:    "Too many sign-ups and sign-ins at once, retry later",
		Extensions: map[string]any{"retryAfter": HashRetryAfter}}
}

// HasherOptions configure a Hasher.
type HasherOptions struct {
	// Params are the argon2id parameters of new hashes; zero means
	// DefaultPasswordParams.
	Params PasswordParams
	// MaxConcurrent is how many hashes made with Params may run at once; zero
	// or less means DefaultMaxConcurrent(Params).
	MaxConcurrent int
	// Wait bounds how long a hash waits for room; zero or less means
	// DefaultHashWait.
	Wait time.Duration
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// DefaultMaxConcurrent is how many hashes made with p run at once by default:
// half the CPUs the process may use (GOMAXPROCS, which follows a container's
// CPU limit) per argon2 lane, so that a flood of sign-ups or sign-ins leaves
// the other half to every other request (bench/abuse: with all of them, a
// signed-in client's p99 rose 19 times); and, when a Go memory limit is set
// (GOMEMLIMIT), no more than a quarter of it in hash memory. Always at least
// one.
func DefaultMaxConcurrent(p PasswordParams) int {
	n := runtime.GOMAXPROCS(0) / 2 / max(int(p.Threads), 1)
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 && p.Memory > 0 {
		n = min(n, int(limit/4/(int64(p.Memory)*1024)))
	}
	return max(n, 1)
}

// hashGarbageKiB is how much hash memory may become garbage before the
// hasher collects it (32 MiB: every other hash of the default parameters). A
// hash's 19 MiB is garbage the moment it ends, and with the server's GOGC=200
// and no GOMEMLIMIT the next collection waits for the heap to triple: in
// bench/abuse, 20 sign-ups after the caches had filled took the RSS to
// 361 MiB. A collection started in the background every 64 MiB still let the
// next hashes allocate beside the garbage it had not reclaimed yet: 272 MiB
// after 2,000 idle connections had taken the RSS to 200 MiB. So the hash that
// reaches the threshold collects before it gives back its room under the
// bound: no hash allocates until the garbage is reclaimed, and the RSS stays
// within the live heap plus two hashes. It costs that hash a collection
// (a few milliseconds beside its 28 ms); the others pay nothing.
const hashGarbageKiB = 32 << 10

// Hasher makes and verifies argon2id password hashes under one bound on the
// memory they hold at once (a weighted semaphore of MaxConcurrent times the
// memory of one hash, each hash weighing the memory of its own parameters),
// so that no number of concurrent sign-ups or sign-ins can hold more than that
// bound: the others wait in line, at most Wait, and are then refused with
// ErrHashingBusy. A Hasher is safe for concurrent use; one process should use
// one, shared by every request.
//
// Metrics: taskflow_password_hashes_in_flight and
// taskflow_password_hashes_waiting (gauges), taskflow_password_hashes_total
// by outcome (ok, busy), taskflow_password_hash_wait_seconds (the time a hash
// waited for room, when it had to).
type Hasher struct {
	params   PasswordParams
	sem      *semaphore.Weighted
	capacity int64 // KiB
	wait     time.Duration
	dummy    string
	metrics  *hashMetrics
	garbage  atomic.Int64 // KiB of hash memory since the last collection it started
	fastest  atomic.Int64 // ns of the fastest hash of params (charge)
}

// NewHasher returns a Hasher.
func NewHasher(o HasherOptions) *Hasher {
	if o.Params == (PasswordParams{}) {
		o.Params = DefaultPasswordParams
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent(o.Params)
	}
	if o.Wait <= 0 {
		o.Wait = DefaultHashWait
	}
	capacity := int64(o.MaxConcurrent) * int64(max(o.Params.Memory, 1))
	return &Hasher{params: o.Params, sem: semaphore.NewWeighted(capacity), capacity: capacity, wait: o.Wait,
		dummy: dummyHash(o.Params), metrics: newHashMetrics(o.Registerer)}
}

// Params returns the parameters of the hasher's new hashes.
func (h *Hasher) Params() PasswordParams { return h.params }

// Run calls fn while holding memory KiB of the hasher's bound (all of it when
// memory is more), after waiting for room at most the hasher's Wait. It
// returns ErrHashingBusy without calling fn when the wait runs out or ctx ends
// first. Hash and Verify run argon2id through it; other memory-hard work can
// share the bound the same way.
func (h *Hasher) Run(ctx context.Context, memory uint32, fn func()) error {
	n := min(max(int64(memory), 1), h.capacity)
	if !h.sem.TryAcquire(n) {
		start := time.Now()
		h.metrics.waiting.Inc()
		wctx, cancel := context.WithTimeout(ctx, h.wait)
		err := h.sem.Acquire(wctx, n)
		cancel()
		h.metrics.waiting.Dec()
		h.metrics.waited.Observe(time.Since(start).Seconds())
		if err != nil {
			h.metrics.busy.Inc()
			return ErrHashingBusy()
		}
	}
	defer h.sem.Release(n)
	h.metrics.inFlight.Inc()
	defer h.metrics.inFlight.Dec()
	start := time.Now()
	fn()
	cpumeter.Add(ctx, h.charge(n, time.Since(start)))
	h.metrics.ok.Inc()
	if h.discarded(n) {
		runtime.GC() // before the room is given back (hashGarbageKiB)
	}
	return nil
}

// charge returns what a hash that took d, holding kib of the bound, is
// charged to its caller's turn (package cpumeter: an address's sign-ups and
// sign-ins are paced by it): d, but at most twice the fastest hash of the
// hasher's own parameters so far, which is what a hash costs on this machine.
// On a busy machine a hash takes longer than it works, and its wall time
// would refuse a caller for the load of others (in the tests, the 7th login
// from one address was refused with Retry-After: 3).
func (h *Hasher) charge(kib int64, d time.Duration) time.Duration {
	if kib != int64(max(h.params.Memory, 1)) {
		return d
	}
	for {
		fastest := time.Duration(h.fastest.Load())
		if fastest != 0 && fastest <= d {
			return min(d, 2*fastest)
		}
		if h.fastest.CompareAndSwap(int64(fastest), int64(d)) {
			return d
		}
	}
}

// discarded counts kib of hash memory become garbage and reports whether
// hashGarbageKiB have since it last did: the caller then collects.
func (h *Hasher) discarded(kib int64) bool {
	if h.garbage.Add(kib) < hashGarbageKiB {
		return false
	}
	h.garbage.Store(0)
	return true
}

// Hash returns the argon2id hash of password made with the hasher's
// parameters (see HashPassword), or ErrHashingBusy.
func (h *Hasher) Hash(ctx context.Context, password string) (string, error) {
	var out string
	err := h.Run(ctx, h.params.Memory, func() { out = HashPassword(password, h.params) })
	return out, err
}

// Verify reports whether password matches the encoded hash, computed with the
// hash's own parameters (see VerifyPassword). It returns an error for a hash
// it cannot read (without hashing anything), or ErrHashingBusy.
func (h *Hasher) Verify(ctx context.Context, password, encoded string) (bool, error) {
	p, salt, key, err := decodeHash(encoded)
	if err != nil {
		return false, err
	}
	var ok bool
	err = h.Run(ctx, p.Memory, func() { ok = verifyKey(password, p, salt, key) })
	return ok, err
}

// dummyHash returns a well-formed hash with parameters p, a random salt and a
// random key: verifying any password against it costs what verifying against
// a real hash made with p does, and never succeeds. A login whose e-mail
// matches no account is verified against it, so that an unknown e-mail costs
// as much time as a wrong password.
func dummyHash(p PasswordParams) string {
	salt, key := make([]byte, max(p.SaltLen, 8)), make([]byte, max(p.KeyLen, 16))
	if _, err := rand.Read(salt); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	if _, err := rand.Read(key); err != nil {
		panic(err)
	}
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// hashMetrics are a Hasher's Prometheus collectors.
type hashMetrics struct {
	inFlight, waiting prometheus.Gauge
	ok, busy          prometheus.Counter
	waited            prometheus.Observer
}

func newHashMetrics(reg prometheus.Registerer) *hashMetrics {
	inFlight := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "taskflow_password_hashes_in_flight",
		Help: "Password hashes (argon2id, register and login) running now.",
	})
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "taskflow_password_hashes_waiting",
		Help: "Password hashes waiting for room under the bound on concurrent hashes.",
	})
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskflow_password_hashes_total",
		Help: "Password hashes by outcome: ok (ran), busy (refused after waiting for room too long).",
	}, []string{"outcome"})
	waited := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "taskflow_password_hash_wait_seconds",
		Help:    "Time a password hash waited for room under the bound, when it had to wait.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	})
	if reg != nil {
		// Hashers of several handlers on one registry share the collectors.
		inFlight = promreg.Register(reg, inFlight)
		waiting = promreg.Register(reg, waiting)
		total = promreg.Register(reg, total)
		waited = promreg.Register(reg, waited)
	}
	return &hashMetrics{inFlight: inFlight, waiting: waiting, ok: total.WithLabelValues("ok"),
		busy: total.WithLabelValues("busy"), waited: waited}
}
