// Command taskflow is the TaskFlow GraphQL API server. It reads its configuration
// from the environment (see config.go and docs/configuration.md), connects to Postgres and
// applies the migrations, serves HTTP until SIGTERM or SIGINT, then finishes the
// requests in flight and exits 0.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"taskflow/audit"
	"taskflow/auditexport"
	"taskflow/blobs"
	"taskflow/egress"
	"taskflow/httpapi"
	"taskflow/idempotency"
	"taskflow/live"
	"taskflow/ratelimit"
	"taskflow/store"
	"taskflow/tracing"
	"taskflow/webhook"
)

// postgresConnectTimeout bounds the first connection attempt at start.
const postgresConnectTimeout = 10 * time.Second

// httpWriteTimeout is the HTTP server's write timeout: an answer not
// written within it after the request's headers were read is lost. The
// answer of a GraphQL query or mutation, the transfers of uploads and
// downloads, and streams set deadlines of their own (a GraphQL answer's is
// its operation's deadline and a margin, however long its body took to
// read), so it bounds the other routes' answers.
const httpWriteTimeout = 60 * time.Second

// defaultGCPercent is the garbage collector's target unless GOGC says
// otherwise: the live heap is small (tens of MB), and collecting at 200%
// instead of Go's 100% gave back GC time to requests (docs/decisions/2026-11-29-gc-target.md).
const defaultGCPercent = 200

// setGCPercent sets the garbage collector's target to defaultGCPercent unless
// the GOGC variable (read through getenv) sets one.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// memoryLimitPercent is the share of the container's memory limit that the
// server takes as the Go runtime's soft memory limit unless GOMEMLIMIT sets
// one: with GOGC at 200 the heap may grow to three times the live heap
// between collections, and near the limit the collector runs sooner instead,
// so that garbage does not take the container past its limit. The rest is
// for what the runtime does not count (stacks of idle connections' goroutines
// are counted; cgo and mmaps are not) and the collector's lag.
const memoryLimitPercent = 80

// cgroupMemoryFiles are where the memory limit of the server's container is
// read: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// setMemoryLimit sets the soft memory limit to memoryLimitPercent of the
// container's memory limit (read through readFile) unless GOMEMLIMIT (read
// through getenv) sets one or no limit is found. It returns the limit it set,
// or 0.
func setMemoryLimit(getenv func(string) string, readFile func(string) ([]byte, error)) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	for _, path := range cgroupMemoryFiles {
		b, err := readFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2) or a number near MaxInt64 (v1): no limit.
		if err != nil || n <= 0 || n >= 1<<50 {
			return 0
		}
		limit := n / 100 * memoryLimitPercent
		debug.SetMemoryLimit(limit)
		return limit
	}
	return 0
}

func main() {
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "taskflow: %v\n", err)
		os.Exit(1)
	}
	logs := newProcessLogs(os.Stderr, cfg.LogLevel, accessLogFlush)
	defer logs.Close()
	log := logs.log
	slog.SetDefault(log)
	setGCPercent(os.Getenv)
	if limit := setMemoryLimit(os.Getenv, os.ReadFile); limit > 0 {
		log.Info("soft memory limit set from the container's", "gomemlimit_bytes", limit, "percent", memoryLimitPercent)
	}
	if err := run(cfg, log, logs.access); err != nil {
		var plain *startupError
		if errors.As(err, &plain) {
			log.Error("taskflow could not start", "err", plain.cause)
			fmt.Fprint(os.Stderr, plain.advice)
		} else {
			log.Error("taskflow stopped", "err", err)
		}
		logs.Close() // os.Exit runs no deferred call
		os.Exit(1)
	}
}

// spineAheadAdvice is the advice of store.ErrSpineAhead: the server refuses
// to write events that nothing would ever seal or deliver.
func spineAheadAdvice(err error) string {
	return "taskflow: " + err.Error() + `.

Every audit event written now would sort below the sealer's and the webhook
dispatcher's cursors: it would never be sealed, delivered or sent to
subscribers, and verifyAuditLog would report it as slipped in. So taskflow
does not start.

What to do: restore from a physical backup of the old cluster (it keeps the
transaction ids), or advance this cluster's transaction ids past the highest
one above before starting taskflow (pg_resetwal -e and -x on the stopped
cluster), then verify every workspace. See docs/operations.md,
"Backups and restores".
`
}

// startupError is a failure at start that comes with advice for a human.
type startupError struct {
	cause  error
	advice string
}

// Error returns the advice.
func (e *startupError) Error() string { return e.advice }

// run starts the server and blocks until SIGTERM or SIGINT, then shuts down
// gracefully: it stops accepting connections, waits for the requests in flight
// and exports the spans still buffered (all within cfg.ShutdownTimeout) and
// returns nil.
func run(cfg Config, log, accessLog *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tp, err := tracing.Start(ctx, cfg.Tracing, log)
	if err != nil {
		return err
	}
	// After SIGTERM the spans are flushed within the SHUTDOWN_TIMEOUT the requests
	// in flight had; on the way out after a failure, within a SHUTDOWN_TIMEOUT of
	// their own. A second Shutdown (after the one of a clean stop) does nothing.
	var shutdownBy time.Time
	defer func() {
		if shutdownBy.IsZero() {
			shutdownBy = time.Now().Add(cfg.ShutdownTimeout)
		}
		flushCtx, cancel := context.WithDeadline(context.Background(), shutdownBy)
		defer cancel()
		if err := tp.Shutdown(flushCtx); err != nil {
			log.Warn("spans of the last requests may be lost", "err", err)
		}
	}()

	conn, source := connString(cfg.DatabaseURL, os.Getenv)
	if err := probePostgres(ctx, conn); err != nil {
		return &startupError{cause: err, advice: postgresAdvice(conn, source, err)}
	}
	poolCfg, err := store.PoolConfig(conn)
	if err != nil {
		return err
	}
	poolCfg.ConnConfig.Tracer = tracing.PgxTracer(tp.TracerProvider())
	db, err := store.OpenConfig(ctx, poolCfg, log)
	if err != nil {
		return err
	}
	defer db.Close()
	// A database restored from another cluster's pg_dump: refuse to write
	// events nothing would reach.
	if err := db.CheckSpineClock(ctx); err != nil {
		if errors.Is(err, store.ErrSpineAhead) {
			return &startupError{cause: err, advice: spineAheadAdvice(err)}
		}
		return err
	}
	db.Egress = egress.Policy{AllowHTTP: cfg.Webhooks.AllowHTTP, AllowPrivate: cfg.Webhooks.AllowPrivate}
	db.AuditExportLimits = store.AuditExportLimits{PerDay: cfg.AuditExports.PerDay, AtOnce: cfg.AuditExports.AtOnce}
	if cfg.ReadBatches >= 0 {
		db.SetReadBatches(cfg.ReadBatches)
	}
	// Partitions ahead and AUDIT_RETENTION, now and every few hours.
	go db.RunAuditMaintenance(ctx, cfg.AuditRetention, 6*time.Hour)
	// The audit sealer of this instance: it chains what the units of work
	// commit and signs checkpoints (one instance seals at a time).
	auditKey := auditSigningKey(cfg.AuditSigningKey, log)
	sealer := &store.AuditSealer{DB: db, Key: auditKey}
	go sealer.Run(ctx)
	// What this instance remembers of bearer tokens stays trustworthy past
	// store.SessionTTL while this feed reads which tokens changed.
	go db.RunRevocationFeed(ctx)
	log.Info("connected to Postgres; migrations applied", "postgres", describePostgres(conn))

	rdb := openRedis(ctx, cfg.RedisURL, log)
	if rdb != nil {
		defer rdb.Close()
	}
	if err := tracing.InstrumentRedis(tp.TracerProvider(), rdb); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(readMetrics(db)...)
	reg.MustRegister(sealCollector{db: db})
	reg.MustRegister(checkpointMetrics(sealer)...)

	bs, err := blobs.Open(ctx, blobs.Options{URL: cfg.BlobURL, DB: db, MaxUploadSize: cfg.MaxUploadSize,
		Quota: cfg.WorkspaceStorageQuota, SweepGrace: cfg.BlobSweepGrace, Log: log})
	if err != nil {
		return err
	}
	defer bs.Close()
	if cfg.BlobURL == "" {
		log.Warn("BLOB_URL is unset: attachments are kept in a local directory, right for a single instance only",
			"blobs", bs.Where())
	} else {
		log.Info("attachments kept in the blob store", "blobs", bs.Where())
	}
	// Unfinished uploads and unused blobs, after BLOB_SWEEP_GRACE.
	warnShortSweepGrace(cfg.BlobSweepGrace, log)
	go bs.RunSweeper(ctx)

	// Webhooks: this instance's dispatcher and River workers; the attempts in
	// flight finish within what is left of SHUTDOWN_TIMEOUT at the end.
	hooks, err := webhook.Start(ctx, webhook.Options{DB: db, Log: log, Registerer: reg, Tracing: tp.TracerProvider(),
		Timeout: cfg.Webhooks.Timeout, RetryBase: cfg.Webhooks.RetryBase, Workers: cfg.Webhooks.Workers,
		More: []webhook.Jobs{auditExportJobs(db, bs, log, reg, cfg.AuditExports)}})
	if err != nil {
		return err
	}
	defer func() {
		by := shutdownBy
		if by.IsZero() {
			by = time.Now().Add(cfg.ShutdownTimeout)
		}
		stopCtx, cancel := context.WithDeadline(context.Background(), by)
		defer cancel()
		if err := hooks.Stop(stopCtx); err != nil {
			log.Warn("webhook attempts in flight were cut off; they will be retried", "err", err)
		}
	}()

	limiter, err := ratelimit.New(ratelimit.Options{
		Config: ratelimit.Config{Points: cfg.RateLimitPoints, Window: cfg.RateLimitWindow, MaxCost: cfg.MaxQueryCost,
			Lease: cfg.RateLimitLease, BadTokenPerIP: ratelimit.Limit{Points: cfg.RateLimitBadTokensPerIP, Window: time.Minute}},
		Redis: rdb, Registerer: reg, Log: log,
	})
	if err != nil {
		return err
	}
	defer limiter.Close()

	// Live subscriptions: the tailer reads the spine until SIGTERM; Close
	// ends the streams before the server shuts down.
	hub := live.New(live.Options{DB: db, Log: log, Redis: rdb, MaxPerUser: cfg.SubscriptionMaxPerUser, Registerer: reg})
	go hub.Run(ctx)

	h := httpapi.NewHandler(httpapi.Options{
		Limiter:         limiter,
		DB:              db,
		Log:             log,
		AccessLog:       accessLog,
		TrustedProxies:  cfg.TrustedProxies,
		Registry:        reg,
		CORS:            cfg.CORS,
		MetricsToken:    cfg.MetricsToken,
		Redis:           rdb, // persisted queries shared by every instance
		IdempotencyTTL:  cfg.IdempotencyTTL,
		IdempotencyWait: idempotencyWait(cfg.IdempotencyWait),
		AuditKeys:       []ed25519.PublicKey{auditKey.Public().(ed25519.PublicKey)},
		Tracing:         tp.TracerProvider(),
		Live:            hub,
		Streams: httpapi.StreamLimits{MaxConnections: cfg.SubscriptionMaxConnections, MaxPerClient: cfg.SubscriptionMaxPerClient,
			KeepAlive: cfg.SubscriptionKeepAlive, Idle: cfg.SubscriptionIdleTimeout},
		Blobs:             bs,
		MaxUploadsPerUser: cfg.MaxUploadsPerUser,
		MaxDownloadRanges: cfg.MaxDownloadRanges,
		RequestTimeout:    cfg.RequestTimeout,
	})
	idempotency.NewPurger(idempotency.PurgerOptions{DB: db, Registerer: reg, Log: log}).Start(ctx)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (set HTTP_ADDR to another address?): %w", cfg.HTTPAddr, err)
	}
	if cfg.PprofAddr != "" {
		closePprof, err := servePprof(cfg.PprofAddr, log)
		if err != nil {
			ln.Close()
			return err
		}
		defer closePprof()
	}
	log.Info("listening", "addr", ln.Addr().String(), "playground", "http://"+displayAddr(ln.Addr())+"/",
		"cors_allowed_origins", cfg.CORS.AllowedOrigins, "rate_limit_points", cfg.RateLimitPoints,
		"rate_limit_window", cfg.RateLimitWindow.String(), "max_query_cost", cfg.MaxQueryCost,
		"request_timeout", cfg.RequestTimeout.String(), "tracing", cfg.Tracing.Enabled)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	log.Info("shutting down: no new connections, finishing requests in flight", "timeout", cfg.ShutdownTimeout.String())
	// Streams never end by themselves: end them first (WebSockets close with
	// 1012, SSE streams with STREAM_INTERRUPTED), so that clients reconnect
	// to another instance at once and Shutdown does not wait for them.
	hub.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	shutdownBy, _ = shutdownCtx.Deadline()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("requests still in flight after %s, closed them: %w", cfg.ShutdownTimeout, err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if err := tp.Shutdown(shutdownCtx); err != nil {
		log.Warn("spans of the last requests may be lost", "err", err)
	}
	log.Info("stopped")
	return nil
}

// connString returns the Postgres connection string to use and a description of
// where it came from. With DATABASE_URL unset it is what psql with no arguments
// would use (libpq defaults and PG* variables); when that is the local Unix
// socket (PGHOST unset), 127.0.0.1 is added as a fallback host, so that a
// Postgres listening only on TCP is found too.
func connString(databaseURL string, getenv func(string) string) (conn, source string) {
	if databaseURL != "" {
		return databaseURL, "DATABASE_URL"
	}
	const source0 = "DATABASE_URL is unset, so the libpq defaults and PG* variables (as psql with no arguments)"
	if getenv("PGHOST") == "" {
		if c, err := pgconn.ParseConfig(""); err == nil && strings.HasPrefix(c.Host, "/") {
			return "host=" + c.Host + ",127.0.0.1", source0 + ", then 127.0.0.1"
		}
	}
	return "", source0
}

// probePostgres connects to Postgres once, within postgresConnectTimeout. The
// connection string is read as the pool reads it, so that pool settings
// (pool_max_conns=...) are not sent to Postgres as run-time parameters.
func probePostgres(ctx context.Context, conn string) error {
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, postgresConnectTimeout)
	defer cancel()
	c, err := pgconn.ConnectConfig(ctx, &cfg.ConnConfig.Config)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// describePostgres describes the servers conn reaches, without any password.
func describePostgres(conn string) string {
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return "(unparsable connection string)"
	}
	db := cfg.Database
	if db == "" {
		db = cfg.User
	}
	hosts := []string{fmt.Sprintf("host=%s port=%d", cfg.Host, cfg.Port)}
	for _, fb := range cfg.Fallbacks { // pgx lists a TCP host twice: with and without TLS
		if h := fmt.Sprintf("host=%s port=%d", fb.Host, fb.Port); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return fmt.Sprintf("%s user=%s database=%s", strings.Join(hosts, ", then "), cfg.User, db)
}

// postgresAdvice is the plain message printed when Postgres does not answer at start.
func postgresAdvice(conn, source string, err error) string {
	start := "  - start the local Postgres, e.g. `sudo systemctl start postgresql`, or on Debian/Ubuntu\n" +
		"    `pg_ctlcluster <version> main start`; on macOS `brew services start postgresql`; or in Docker\n" +
		"    `docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`\n"
	if versions, _ := filepath.Glob("/etc/postgresql/*/main"); len(versions) > 0 {
		v := filepath.Base(filepath.Dir(versions[0]))
		start = fmt.Sprintf("  - start the local Postgres: `pg_ctlcluster --skip-systemctl-redirect %s main start`\n"+
			"    (or `sudo systemctl start postgresql`)\n", v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\ntaskflow: cannot reach Postgres.\n")
	fmt.Fprintf(&b, "  tried: %s\n", describePostgres(conn))
	fmt.Fprintf(&b, "  from:  %s\n", source)
	fmt.Fprintf(&b, "  error: %v\n\n", err)
	fmt.Fprintf(&b, "What to do:\n%s", start)
	if strings.Contains(err.Error(), "does not exist") {
		fmt.Fprintf(&b, "  - create the missing role or database, e.g. `createdb` (a database named after your user)\n")
	}
	fmt.Fprintf(&b, "  - or point DATABASE_URL at a running server:\n"+
		"    DATABASE_URL=postgres://user:password@host:5432/taskflow go run .\n")
	return b.String()
}

// openRedis returns the Redis client of REDIS_URL: one server or a Redis Cluster,
// nil when it is unset. With no REDIS_URL, rate limiting and persisted queries
// are in-process and correct for a single instance only, which is logged. A
// Redis that does not answer at start is logged and does not stop the start: it
// degrades rate limiting, it does not take the instance out. /healthz reports
// Redis as the rate limiter sees it.
func openRedis(ctx context.Context, redisURL string, log *slog.Logger) redis.UniversalClient {
	if redisURL == "" {
		log.Warn("REDIS_URL is unset: rate limits and persisted queries are kept in process, correct for a single instance only")
		return nil
	}
	target, err := parseRedisURL(redisURL) // validated by loadConfig
	if err != nil {
		panic(err)
	}
	rdb := target.client()
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		log.Warn("Redis does not answer: rate limiting is degraded until it does", "addr", target.addrs(), "err", err)
	}
	return rdb
}

// displayAddr turns a listen address into one a browser can open.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// idempotencyWait maps IDEMPOTENCY_WAIT to httpapi.Options, where zero means the
// default: an explicit 0 (do not wait for a concurrent duplicate) becomes negative.
func idempotencyWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// auditSigningKey returns the key of AUDIT_SIGNING_KEY, or, when it is unset,
// a new one, logged with a warning: checkpoints it signs verify only while
// this process runs, and instances that do not share one key cannot verify
// each other's checkpoints.
func auditSigningKey(key ed25519.PrivateKey, log *slog.Logger) ed25519.PrivateKey {
	if key != nil {
		pub := key.Public().(ed25519.PublicKey)
		log.Info("audit checkpoints are signed with AUDIT_SIGNING_KEY", "key_id", audit.KeyID(pub), "public_key", audit.EncodePublicKey(pub))
		return key
	}
	key = audit.GenerateSigningKey()
	pub := key.Public().(ed25519.PublicKey)
	log.Warn("AUDIT_SIGNING_KEY is unset: generated an audit signing key for this process only; "+
		"set one key on every instance (for local use, this one)",
		"key_id", audit.KeyID(pub), "public_key", audit.EncodePublicKey(pub), "AUDIT_SIGNING_KEY", audit.EncodeSigningKey(key))
	return key
}

// readMetrics are the counters of db.ReadStats: taskflow_db_reads_total by how
// a read was sent (alone, together with other requests' reads, or again on
// its own after a failure before it) and taskflow_db_read_batches_total, the
// round trips reads shared, and taskflow_db_reads_waiting.
func readMetrics(db *store.DB) []prometheus.Collector {
	reads := func(sent string, n func(store.ReadStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "taskflow_db_reads_total",
			Help:        "Reads of tasks and task pages sent outside a transaction, by how: alone, together (sharing a round trip with other requests' reads), again (alone, after a failure before them in a shared round trip).",
			ConstLabels: prometheus.Labels{"sent": sent},
		}, func() float64 { return float64(n(db.ReadStats())) })
	}
	return []prometheus.Collector{
		reads("alone", func(s store.ReadStats) uint64 { return s.Alone }),
		reads("together", func(s store.ReadStats) uint64 { return s.Together }),
		reads("again", func(s store.ReadStats) uint64 { return s.Again }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "taskflow_db_read_batches_total",
			Help: "Round trips to Postgres that several requests' reads shared (DATABASE_READ_BATCHES).",
		}, func() float64 { return float64(db.ReadStats().Batches) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "taskflow_db_reads_waiting",
			Help: "Reads waiting for a round trip: every one of DATABASE_READ_BATCHES was in flight when they came.",
		}, func() float64 { return float64(db.ReadStats().Waiting) }),
	}
}

// sealCollector reports, at each scrape, what waits for the audit sealer
// (db.AuditSealBacklog, one query bounded by a second): the events it has
// not reached and the age of the oldest, and whether its cursor is missing,
// which stops it (store.ErrSealCursorMissing).
type sealCollector struct{ db *store.DB }

var (
	sealBacklogDesc = prometheus.NewDesc("taskflow_audit_seal_backlog",
		"Audit events the sealer has not reached yet (absent while its cursor is missing).", nil, nil)
	sealOldestDesc = prometheus.NewDesc("taskflow_audit_seal_oldest_seconds",
		"Age of the oldest audit event the sealer has not reached yet (0 when none; absent while its cursor is missing).", nil, nil)
	sealCursorMissingDesc = prometheus.NewDesc("taskflow_audit_seal_cursor_missing",
		"1 when the audit sealer's cursor (row 1 of audit_seal_cursor) is missing: nothing is sealed until it is restored; else 0.", nil, nil)
)

// Describe sends the descriptions.
func (c sealCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sealBacklogDesc
	ch <- sealOldestDesc
	ch <- sealCursorMissingDesc
}

// Collect reads the backlog; a failed read reports nothing.
func (c sealCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := c.db.AuditSealBacklog(ctx)
	switch {
	case errors.Is(err, store.ErrSealCursorMissing):
		ch <- prometheus.MustNewConstMetric(sealCursorMissingDesc, prometheus.GaugeValue, 1)
	case err == nil:
		ch <- prometheus.MustNewConstMetric(sealCursorMissingDesc, prometheus.GaugeValue, 0)
		ch <- prometheus.MustNewConstMetric(sealBacklogDesc, prometheus.GaugeValue, float64(b.Events))
		age := 0.0
		if !b.Oldest.IsZero() {
			age = max(time.Since(b.Oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(sealOldestDesc, prometheus.GaugeValue, age)
	}
}

// checkpointMetrics are the counters of the checkpoints sealer did not
// store, or its DB did not answer: taskflow_audit_checkpoints_withheld_total,
// those it did not sign because their chain no longer extends the last
// checkpoint signed of it or a seal since does not recompute
// (store.AuditSealer.WithheldCheckpoints: a tampered audit log),
// taskflow_audit_checkpoints_blocked_total, those it signed but could not
// store because another row held their key in audit_checkpoints
// (store.AuditSealer.BlockedCheckpoints: a row inserted by someone with
// write access to the database), and
// taskflow_audit_checkpoints_unverified_total, the distinct rows with its
// key id whose signature does not verify that auditCheckpoint skipped, each
// counted once (store.DB.UnverifiedCheckpoints: rows inserted the same way).
func checkpointMetrics(sealer *store.AuditSealer) []prometheus.Collector {
	checkpoints := func(name, help string, n func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(n()) })
	}
	return []prometheus.Collector{
		checkpoints("taskflow_audit_checkpoints_withheld_total",
			"Audit checkpoints this instance withheld: chains it did not sign because the chain no longer extends the last checkpoint signed of it (a seal at or after it changed or removed) or a seal since does not recompute from its event, a tampered log. Each tampering counts once, at the first sealer round of this instance that finds it; the ERROR line naming the chain repeats at every round that finds it until the chain is repaired, and a chain tampered anew after it was signed again counts again. Each instance counts for itself: summed over instances, a tampering counts once per instance that found it.",
			sealer.WithheldCheckpoints),
		checkpoints("taskflow_audit_checkpoints_blocked_total",
			"Audit checkpoints this instance signed but did not store because a row of audit_checkpoints that is not a checkpoint of the same head already held their chain, position and key id (inserted by someone with write access to the database), logged at ERROR with the chain.",
			sealer.BlockedCheckpoints),
		checkpoints("taskflow_audit_checkpoints_unverified_total",
			"Distinct rows of audit_checkpoints with the id of a key the server trusts whose signature does not verify with that key (inserted by someone with write access to the database) that auditCheckpoint skipped: each counted, and logged at ERROR with the chain, once per process however often it is read (the first 1,024 rows are remembered; past them a row not remembered counts at each read that skips it).",
			sealer.DB.UnverifiedCheckpoints),
	}
}

// warnShortSweepGrace warns when BLOB_SWEEP_GRACE is shorter than an upload
// may take (httpapi.TransferTimeout): the sweeper may then delete the bytes
// of an upload still under way, which fails.
func warnShortSweepGrace(grace time.Duration, log *slog.Logger) {
	if grace < httpapi.TransferTimeout {
		log.Warn("BLOB_SWEEP_GRACE is shorter than an upload may take: the sweeper may delete the bytes of a slow upload under way, which then fails; keep it above "+
			httpapi.TransferTimeout.String(), "BLOB_SWEEP_GRACE", grace.String())
	}
}

// auditExportJobs are the River jobs of asynchronous audit exports, for the
// instance's River client (webhook.Start's).
func auditExportJobs(db *store.DB, bs *blobs.Store, log *slog.Logger, reg prometheus.Registerer, c AuditExportConfig) webhook.Jobs {
	j := auditexport.New(auditexport.Options{DB: db, Blobs: bs, Log: log, Workers: c.Workers, TTL: c.TTL,
		MaxBytes: c.MaxBytes, Timeout: c.Timeout, TakeoverAfter: c.TakeoverAfter, Registerer: reg})
	return webhook.Jobs{Register: j.Register, Queues: j.Queues, Periodic: j.Periodic}
}
