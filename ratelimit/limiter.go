// Package ratelimit is TaskFlow's rate limiting: the query cost (package cost, read from
// the schema's @cost/@listSize directives), GCRA budgets in Redis (or in process)
// with a fail-open policy, the endpoint limits of login, register and
// searchTasks, and the gqlgen extension that checks them all after parse and
// validation, before execution. The HTTP transport (package httpapi) turns its
// answers into responses (429 for RATE_LIMITED; QUERY_TOO_COSTLY as a
// validation failure) and RateLimit headers.
package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Limit names, used as metric labels and key prefixes.
const (
	LimitCost       = "cost"
	LimitLoginIP    = "login_ip"
	LimitLoginEmail = "login_email"
	LimitRegisterIP = "register_ip"
	LimitSearch     = "search"
)

// Config is the rate-limit configuration of the contract.
type Config struct {
	// Points is the cost budget (RATE_LIMIT_POINTS, default 1000).
	Points int
	// Window is the time a full budget takes to refill (RATE_LIMIT_WINDOW, default 1m).
	Window time.Duration
	// MaxCost is the most one operation may cost (MAX_QUERY_COST, default 1000).
	MaxCost int
	// RedisURL is REDIS_URL; empty means the in-process limiter.
	RedisURL string
	// Lease is the most of a cost budget one instance may lease from Redis at
	// a time and spend without a round trip (RATE_LIMIT_LEASE, default 0.1);
	// negative turns leases off: every operation is checked in Redis. See
	// leaseStore for what leases keep of the contract. Endpoint limits (login,
	// register, searchTasks) are always checked per operation.
	Lease float64
	// LeasePeriod is how long a lease lasts (default 1s).
	LeasePeriod time.Duration
	// LoginPerIP, LoginPerEmail, RegisterPerIP and Search are the endpoint
	// limits; zero values are the contract's 10/10min, 5/10min, 20/1h and
	// 60/1min.
	LoginPerIP, LoginPerEmail, RegisterPerIP, Search Limit
	// BadTokenPerIP is how many bearer tokens that are not valid a client
	// network may send (RATE_LIMIT_BAD_TOKENS_PER_IP a minute; zero value:
	// DefaultBadTokenPerIP), checked by TokenGuard.
	BadTokenPerIP Limit
	// PersistedQueryKiBPerIP is how many KiB of persisted-query texts a
	// client network may store (zero value: DefaultPersistedQueryKiBPerIP),
	// checked by AllowPersistedQuery.
	PersistedQueryKiBPerIP Limit
}

// DefaultRegisterPerIP is the contract's register limit: 20 accounts per hour
// per client IP, refilled continuously (one every 3 minutes), so that a
// classroom or an office behind one NAT address can sign up 20 people at once
// and 20 more within the hour, while one address cannot create more than 480
// accounts a day.
var DefaultRegisterPerIP = Limit{Points: 20, Window: time.Hour}

func (c Config) withDefaults() Config {
	if c.Points <= 0 {
		c.Points = 1000
	}
	if c.Window <= 0 {
		c.Window = time.Minute
	}
	if c.MaxCost <= 0 {
		c.MaxCost = 1000
	}
	if c.Lease == 0 {
		c.Lease = 0.1
	}
	if c.LeasePeriod <= 0 {
		c.LeasePeriod = time.Second
	}
	if c.LoginPerIP.Points <= 0 {
		c.LoginPerIP = Limit{Points: 10, Window: 10 * time.Minute}
	}
	if c.LoginPerEmail.Points <= 0 {
		c.LoginPerEmail = Limit{Points: 5, Window: 10 * time.Minute}
	}
	if c.RegisterPerIP.Points <= 0 {
		c.RegisterPerIP = DefaultRegisterPerIP
	}
	if c.Search.Points <= 0 {
		c.Search = Limit{Points: 60, Window: time.Minute}
	}
	if c.BadTokenPerIP.Points <= 0 {
		c.BadTokenPerIP = DefaultBadTokenPerIP
	}
	if c.PersistedQueryKiBPerIP.Points <= 0 {
		c.PersistedQueryKiBPerIP = DefaultPersistedQueryKiBPerIP
	}
	return c
}

// Options are the dependencies of a Limiter.
type Options struct {
	Config Config
	// Redis is the client to use; nil with Config.RedisURL set dials it; nil
	// with no URL means the in-process limiter (single instance only).
	Redis redis.UniversalClient
	// KeyPrefix separates budgets of different deployments (and tests) in one Redis.
	KeyPrefix string
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// ProbeInterval is how often a Redis in outage is probed (default 1s).
	ProbeInterval time.Duration
}

// Limiter holds every budget. With Redis it is shared by all instances; when
// Redis fails it fails open to an in-process limiter with the same semantics
// (logged, counted in taskflow_ratelimit_redis_failures_total and reported by
// Status) and probes Redis until it answers again, then goes back to it.
type Limiter struct {
	cfg   Config
	log   *slog.Logger
	mem   *memoryStore
	redis *redisStore
	lease *leaseStore // nil: leases off, or no Redis
	// policyHeader is the RateLimit-Policy header of the cost budget.
	policyHeader string
	rdb          redis.UniversalClient
	healthy      atomic.Bool
	probing      atomic.Bool
	probe        time.Duration
	lastErr      atomic.Value // string
	done         chan struct{}
	once         sync.Once
	metrics      *metrics
	// turns are the callers' turns before execution (Turn).
	turns turns
	// blocked are the client networks refused for invalid bearer tokens
	// (TokenGuard).
	blocked *blockList
	// holds are the worst cases of work let through and not yet charged
	// (reserve).
	holds holds
}

// New returns a Limiter; it fails only for a malformed REDIS_URL.
func New(o Options) (*Limiter, error) {
	l := &Limiter{
		cfg:     o.Config.withDefaults(),
		log:     o.Log,
		mem:     newMemoryStore(),
		probe:   o.ProbeInterval,
		done:    make(chan struct{}),
		metrics: newMetrics(o.Registerer),
		blocked: newBlockList(maxBlocked),
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.turns.waiting, l.turns.active, l.turns.refused = l.metrics.turnsWaiting, l.metrics.turnsActive, l.metrics.turnsRefused
	l.policyHeader = policyHeader(l.costLimit())
	if l.probe <= 0 {
		l.probe = time.Second
	}
	l.rdb = o.Redis
	if l.rdb == nil && l.cfg.RedisURL != "" {
		opt, err := redis.ParseURL(l.cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		l.rdb = redis.NewClient(opt)
	}
	if l.rdb != nil {
		ap := autoPipelined(l.rdb)
		l.redis = &redisStore{lim: redis_rate.NewLimiter(ap), prefix: "taskflow:" + o.KeyPrefix}
		if l.cfg.Lease > 0 {
			l.lease = newLeaseStore(ap, l.redis.prefix, l.cfg.Lease, l.cfg.LeasePeriod, l.metrics.leased.Inc)
		}
		l.healthy.Store(true)
	} else {
		l.log.Debug("rate limiting in process: budgets are per instance") // server.go warns about a missing REDIS_URL
	}
	return l, nil
}

// Config returns the effective configuration.
func (l *Limiter) Config() Config { return l.cfg }

// Close stops a running Redis probe and gives this instance's unspent leases
// back to Redis. It does not close a client it was given.
func (l *Limiter) Close() {
	l.once.Do(func() {
		close(l.done)
		if l.lease != nil {
			// During an outage what the leases hold is unknown (and unreachable).
			l.lease.close(l.healthy.Load())
		}
	})
}

// Status is the limiter's health for /healthz.
type Status struct {
	// Backend is "redis", "memory" (no REDIS_URL) or "memory-fallback" (Redis down).
	Backend string `json:"backend"`
	// Healthy is false while Redis is configured but unreachable.
	Healthy bool `json:"healthy"`
	// Error is the last Redis error during an outage.
	Error string `json:"error,omitempty"`
}

// Status reports how rate limiting is working right now.
func (l *Limiter) Status() Status {
	switch {
	case l.redis == nil:
		return Status{Backend: "memory", Healthy: true}
	case l.healthy.Load():
		return Status{Backend: "redis", Healthy: true}
	default:
		msg, _ := l.lastErr.Load().(string)
		return Status{Backend: "memory-fallback", Healthy: false, Error: msg}
	}
}

// Check asks Redis whether it answers when the limiter believes it does (no
// traffic may have told it otherwise), switching to the in-process fallback
// when it does not, and returns the resulting Status. It is what /healthz
// shows; without Redis it is Status.
func (l *Limiter) Check(ctx context.Context) Status {
	if l.redis != nil && l.healthy.Load() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		err := ping(ctx, l.rdb)
		cancel()
		if err != nil {
			l.fail(err)
		}
	}
	return l.Status()
}

// Healthy reports whether the configured backend answers (always true in process).
func (l *Limiter) Healthy() bool { return l.Status().Healthy }

// AllowN takes n points of the budget key under limit name, from Redis when it
// is healthy (for the cost budget, from this instance's lease when it holds
// one), else from the in-process limiter. It never fails.
func (l *Limiter) AllowN(ctx context.Context, name, key string, lim Limit, n int) Result {
	return l.allow(ctx, name, name+":"+key, lim, n)
}

// allow is AllowN with the budget's full key (name + ":" + key).
func (l *Limiter) allow(ctx context.Context, name, full string, lim Limit, n int) Result {
	if l.redis != nil && l.healthy.Load() {
		var be backend = l.redis
		if name == LimitCost && l.lease != nil {
			if res, ok := l.lease.local(full, lim, n); ok {
				return res
			}
			be = l.lease
		}
		ctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		ctx2, span := startRedisCheck(ctx2, name)
		res, err := be.allowN(ctx2, full, lim, n)
		endRedisCheck(span, err)
		cancel()
		if err == nil {
			return res
		}
		l.fail(err)
	}
	res, _ := l.mem.allowN(ctx, full, lim, n)
	return res
}

// fail switches to the in-process limiter and starts probing Redis.
func (l *Limiter) fail(err error) {
	l.lastErr.Store(err.Error())
	l.metrics.redisFailures.Inc()
	if l.lease != nil {
		l.lease.drop()
	}
	if l.healthy.CompareAndSwap(true, false) {
		l.log.Error("rate limiting: Redis unreachable, failing open to the in-process limiter", "err", err)
		l.metrics.redisUp.Set(0)
	}
	if l.probing.CompareAndSwap(false, true) {
		go l.probeLoop()
	}
}

func (l *Limiter) probeLoop() {
	defer l.probing.Store(false)
	t := time.NewTicker(l.probe)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ping(ctx, l.rdb)
		cancel()
		if err == nil {
			l.healthy.Store(true)
			l.metrics.redisUp.Set(1)
			l.log.Info("rate limiting: Redis is back, budgets are shared again")
			return
		}
		l.lastErr.Store(err.Error())
	}
}

// scriptRunner is what redis_rate needs of a client: scripts and Del.
type scriptRunner interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// autoPipeliner is a Redis client that can batch concurrent callers' commands
// (go-redis' *Client and *ClusterClient both can).
type autoPipeliner interface {
	AutoPipeline() (*redis.AutoPipeliner, error)
}

// autoPipelined returns what redis_rate should send its scripts through: the
// client's blocking autopipeliner when it has one, so the budget checks of
// concurrent requests share one round trip (each check is still its own atomic
// EVALSHA, and each caller still waits for its own answer), else the client.
// Under load this is what keeps the Redis limiter's cost per operation small:
// without it every operation pays a write and a read system call of its own.
// The autopipeliner is cached by the client and released when it is closed.
func autoPipelined(rdb redis.UniversalClient) scriptRunner {
	if c, ok := rdb.(autoPipeliner); ok {
		if ap, err := c.AutoPipeline(); err == nil {
			return ap
		}
	}
	return rdb
}
