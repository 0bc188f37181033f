package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/jackc/pgx/v5/pgconn"

	"taskflow/audit"
	"taskflow/auditexport"
	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/live"
	"taskflow/ratelimit"
	"taskflow/store"
	"taskflow/tracing"
	"taskflow/webhook"
)

// Config is TaskFlow's configuration, read from the environment at start (see the
// table of docs/configuration.md, kept equal to it by a test).
type Config struct {
	// HTTPAddr is the listen address (HTTP_ADDR, default ":8080").
	HTTPAddr string
	// DatabaseURL is the Postgres URL or key=value string (DATABASE_URL); empty
	// means the libpq defaults and PG* variables, as psql with no arguments.
	DatabaseURL string
	// ReadBatches is how many batches of concurrent requests' reads an
	// instance has in flight at most (DATABASE_READ_BATCHES); 0 sends every
	// read on its own; -1, the default, is store.DefaultReadBatches of the
	// pool size.
	ReadBatches int
	// RedisURL is the Redis URL (REDIS_URL): one server, or a Redis Cluster by
	// several seed addresses (see parseRedisURL); empty means an in-process rate
	// limiter.
	RedisURL string
	// CORS is the browser policy of /query (CORS_ALLOWED_ORIGINS,
	// CORS_ALLOW_CREDENTIALS).
	CORS httpapi.CORS
	// TrustedProxies are the proxies whose X-Forwarded-For is believed
	// (TRUSTED_PROXIES, CIDRs or addresses).
	TrustedProxies httpapi.Proxies
	// RateLimitPoints is the query-cost budget per window (RATE_LIMIT_POINTS, 1000).
	RateLimitPoints int
	// RateLimitWindow is the time the budget refills in (RATE_LIMIT_WINDOW, 1m).
	RateLimitWindow time.Duration
	// MaxQueryCost is the most one operation may cost (MAX_QUERY_COST, 1000).
	MaxQueryCost int
	// RateLimitLease is the most of a cost budget one instance leases from Redis
	// and spends without a round trip (RATE_LIMIT_LEASE, 0.1); negative turns
	// leases off ("0" in the environment).
	RateLimitLease float64
	// RateLimitBadTokensPerIP is how many bearer tokens that are not valid
	// one client network may send a minute, refilled continuously
	// (RATE_LIMIT_BAD_TOKENS_PER_IP, 30); over it the network is answered 429
	// without a token lookup until its retry time.
	RateLimitBadTokensPerIP int
	// IdempotencyTTL is how long idempotency keys are kept (IDEMPOTENCY_TTL, 24h).
	IdempotencyTTL time.Duration
	// IdempotencyWait bounds the wait for a concurrent request with the same key
	// (IDEMPOTENCY_WAIT, 5s).
	IdempotencyWait time.Duration
	// AuditRetention is how long audit events are kept (AUDIT_RETENTION); 0 means
	// forever, the default.
	AuditRetention time.Duration
	// AuditSigningKey signs audit checkpoints (AUDIT_SIGNING_KEY: the base64
	// of an Ed25519 seed or PKCS#8 key, or a PKCS#8 PEM block); nil when unset,
	// and run then generates one for local use.
	AuditSigningKey ed25519.PrivateKey
	// RequestTimeout bounds the execution of each GraphQL query and
	// mutation, on every transport (REQUEST_TIMEOUT, 30s; from
	// minRequestTimeout to maxRequestTimeout); subscriptions are not
	// bounded by it.
	RequestTimeout time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests on SIGTERM
	// (SHUTDOWN_TIMEOUT, 30s).
	ShutdownTimeout time.Duration
	// LogLevel is the least level logged (LOG_LEVEL: debug, info, warn, error).
	LogLevel slog.Level
	// PprofAddr is the listen address of net/http/pprof (PPROF_ADDR), a listener
	// of its own, never HTTP_ADDR; empty, the default, serves no pprof.
	PprofAddr string
	// MetricsToken, when set (METRICS_TOKEN), is the bearer token /metrics
	// requires; empty, the default, leaves /metrics open.
	MetricsToken string
	// SubscriptionMaxPerUser bounds one user's open subscriptions on one
	// instance (SUBSCRIPTION_MAX_PER_USER, 100).
	SubscriptionMaxPerUser int
	// SubscriptionMaxConnections bounds the WebSocket connections and SSE
	// streams one instance holds (SUBSCRIPTION_MAX_CONNECTIONS, 10000).
	SubscriptionMaxConnections int
	// SubscriptionMaxPerClient bounds the WebSocket connections and SSE
	// streams one client holds on one instance, the client being a signed-in
	// user, or for an anonymous stream its network (an IPv4 address, an IPv6
	// /64), and bounds as well a network's WebSocket connections waiting for
	// their connection_init (SUBSCRIPTION_MAX_PER_CLIENT, 200).
	SubscriptionMaxPerClient int
	// SubscriptionKeepAlive is the ping interval of the streams
	// (SUBSCRIPTION_KEEPALIVE, 15s).
	SubscriptionKeepAlive time.Duration
	// SubscriptionIdleTimeout closes a WebSocket connection that has had no
	// subscription for that long (SUBSCRIPTION_IDLE_TIMEOUT, 5m).
	SubscriptionIdleTimeout time.Duration
	// Webhooks configures webhook deliveries (WEBHOOK_*).
	Webhooks WebhookConfig
	// AuditExports configures asynchronous audit exports (AUDIT_EXPORT_*).
	AuditExports AuditExportConfig
	// Tracing is the OpenTelemetry tracing configuration of the standard OTEL_*
	// variables (package tracing): off unless an OTLP endpoint is set. The SDK
	// reads the other OTEL_* variables (service name, resource attributes,
	// exporter headers, timeout, compression, batching) itself.
	Tracing tracing.Config
	// BlobURL is where attachments are kept (BLOB_URL): file:///dir,
	// s3://bucket?region=...; empty means blobs.DefaultDir.
	BlobURL string
	// MaxUploadSize bounds the files of one request together
	// (MAX_UPLOAD_SIZE, 25 MiB, or what RATE_LIMIT_POINTS pays for when that
	// is less).
	MaxUploadSize int64
	// WorkspaceStorageQuota bounds the distinct attached files of a workspace
	// (WORKSPACE_STORAGE_QUOTA, 1 GiB); negative means none ("0").
	WorkspaceStorageQuota int64
	// BlobSweepGrace is how long unfinished uploads and unused blobs are kept
	// before the sweeper deletes them (BLOB_SWEEP_GRACE, 1h).
	BlobSweepGrace time.Duration
	// MaxUploadsPerUser bounds the multipart requests of one user an
	// instance reads at once (MAX_UPLOADS_PER_USER, 16).
	MaxUploadsPerUser int
	// MaxDownloadRanges is the most ranges of a download's Range header
	// served as ranges; more get the whole file (MAX_DOWNLOAD_RANGES, 16).
	MaxDownloadRanges int
}

// Bounds of MAX_UPLOADS_PER_USER and MAX_DOWNLOAD_RANGES: each upload holds
// a connection and a blob-store writer for up to 10 minutes, and each range
// is a read of the blob store.
const (
	maxUploadsPerUserLimit = 1000
	maxDownloadRangesLimit = 1000
)

// Bounds of REQUEST_TIMEOUT: below minRequestTimeout ordinary operations
// fail (cancelling a statement alone takes a round trip to Postgres on a
// connection of its own). Above maxRequestTimeout the proxies and load
// balancers usually in front of the server, whose timeouts are commonly 60 s
// (nginx's proxy_read_timeout, an AWS ALB's idle timeout), would answer 504
// before the server answers TIMEOUT, and a client would retry an operation
// that still runs. The server's own write timeout (httpWriteTimeout) no
// longer bounds it: an operation's answer has a write deadline of its own,
// the operation's deadline and a margin (httpapi.Transport).
const (
	minRequestTimeout = 100 * time.Millisecond
	maxRequestTimeout = 50 * time.Second
)

// maxUploadSizeLimit is the largest MAX_UPLOAD_SIZE: sizes are GraphQL Ints.
const maxUploadSizeLimit = 1<<31 - 1

// WebhookConfig is the configuration of webhook deliveries.
type WebhookConfig struct {
	// AllowHTTP accepts http:// endpoint URLs (WEBHOOK_ALLOW_HTTP, false).
	AllowHTTP bool
	// AllowPrivate accepts endpoints on loopback, private, link-local and
	// metadata addresses (WEBHOOK_ALLOW_PRIVATE, false).
	AllowPrivate bool
	// Timeout bounds one delivery attempt (WEBHOOK_TIMEOUT, 15s).
	Timeout time.Duration
	// RetryBase is the wait before the first retry (WEBHOOK_RETRY_BASE, 15s).
	RetryBase time.Duration
	// Workers is how many attempts an instance makes at once (WEBHOOK_WORKERS, 16).
	Workers int
}

// AuditExportConfig is the configuration of asynchronous audit exports
// (startAuditExport).
type AuditExportConfig struct {
	// Workers is how many exports an instance writes at once
	// (AUDIT_EXPORT_WORKERS, 2).
	Workers int
	// TTL is how long a finished export's file is kept (AUDIT_EXPORT_TTL, 24h).
	TTL time.Duration
	// MaxBytes bounds one export's file (AUDIT_EXPORT_MAX_BYTES, 1 GiB; at
	// most 2 GiB - 1: AuditExport.bytes is a GraphQL Int).
	MaxBytes int64
	// Timeout bounds one run of an export (AUDIT_EXPORT_TIMEOUT, 1h).
	Timeout time.Duration
	// PerDay is the most exports a workspace starts in 24 hours
	// (AUDIT_EXPORT_PER_DAY, 10).
	PerDay int
	// AtOnce is the most exports of a workspace queued or running at a time
	// (AUDIT_EXPORT_AT_ONCE, 1).
	AtOnce int
	// TakeoverAfter is how long a run may go without a heartbeat before a
	// new run takes its export over (AUDIT_EXPORT_TAKEOVER_AFTER, 2m; from
	// minTakeoverAfter to half of Timeout).
	TakeoverAfter time.Duration
}

// minTakeoverAfter is the shortest AUDIT_EXPORT_TAKEOVER_AFTER: a run stamps
// its heartbeat every eighth of it, a round trip to Postgres each.
const minTakeoverAfter = 10 * time.Second

// loadConfig reads the configuration through getenv (os.Getenv in main) and
// validates it. Every bad value is reported, each naming its variable.
func loadConfig(getenv func(string) string) (Config, error) {
	c := Config{
		HTTPAddr:                ":8080",
		ReadBatches:             -1,
		RateLimitPoints:         1000,
		RateLimitWindow:         time.Minute,
		MaxQueryCost:            1000,
		RateLimitBadTokensPerIP: ratelimit.DefaultBadTokenPerIP.Points,
		IdempotencyTTL:          24 * time.Hour,
		IdempotencyWait:         5 * time.Second,
		RequestTimeout:          httpapi.DefaultRequestTimeout,
		ShutdownTimeout:         30 * time.Second,
		LogLevel:                slog.LevelInfo,
		MaxUploadSize:           blobs.DefaultMaxUploadSize,
		WorkspaceStorageQuota:   blobs.DefaultQuota,
		BlobSweepGrace:          blobs.DefaultSweepGrace,
		MaxUploadsPerUser:       httpapi.DefaultMaxUploadsPerUser,
		MaxDownloadRanges:       httpapi.DefaultMaxRanges,
		Webhooks:                WebhookConfig{Timeout: webhook.DefaultTimeout, RetryBase: webhook.DefaultRetryBase, Workers: webhook.DefaultWorkers},
		AuditExports: AuditExportConfig{Workers: auditexport.DefaultWorkers, TTL: auditexport.DefaultTTL,
			MaxBytes: auditexport.DefaultMaxBytes, Timeout: auditexport.DefaultTimeout,
			PerDay: store.DefaultAuditExportsPerDay, AtOnce: store.DefaultAuditExportsAtOnce,
			TakeoverAfter: auditexport.DefaultTakeoverAfter},

		SubscriptionMaxPerUser:     live.DefaultMaxPerUser,
		SubscriptionMaxConnections: httpapi.DefaultMaxStreams,
		SubscriptionMaxPerClient:   httpapi.DefaultMaxStreamsPerClient,
		SubscriptionKeepAlive:      httpapi.DefaultKeepAlive,
		SubscriptionIdleTimeout:    httpapi.DefaultStreamIdle,
	}
	var errs []error
	bad := func(name, value, why string) {
		errs = append(errs, fmt.Errorf("%s=%q: %s", name, value, why))
	}
	get := func(name string) (string, bool) {
		v := strings.TrimSpace(getenv(name))
		return v, v != ""
	}

	listenAddr := func(name, example string, dst *string) {
		if v, ok := get(name); ok {
			if _, port, err := net.SplitHostPort(v); err != nil {
				bad(name, v, "not a listen address like "+example)
			} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
				bad(name, v, "the port must be a number from 0 to 65535")
			} else {
				*dst = v
			}
		}
	}
	listenAddr("HTTP_ADDR", ":8080 or 127.0.0.1:8080", &c.HTTPAddr)
	listenAddr("PPROF_ADDR", "127.0.0.1:6060", &c.PprofAddr)
	if _, port, _ := net.SplitHostPort(c.PprofAddr); c.PprofAddr == c.HTTPAddr && port != "0" {
		bad("PPROF_ADDR", c.PprofAddr, "must not be HTTP_ADDR: pprof is served on a listener of its own, never the public one")
	}
	if v, ok := get("METRICS_TOKEN"); ok {
		if len(v) < 16 {
			bad("METRICS_TOKEN", "(hidden)", "too short: use 16 characters or more (e.g. openssl rand -hex 32)")
		} else {
			c.MetricsToken = v
		}
	}
	if v, ok := get("DATABASE_URL"); ok {
		if _, err := pgconn.ParseConfig(v); err != nil {
			msg := err.Error()
			if i := strings.LastIndex(msg, "`: "); i >= 0 {
				msg = msg[i+3:] // pgconn quotes the (redacted) string first
			}
			bad("DATABASE_URL", redactURL(v), "not a Postgres URL like postgres://user:password@host:5432/dbname ("+msg+")")
		} else {
			c.DatabaseURL = v
		}
	}
	if v, ok := get("REDIS_URL"); ok {
		if _, err := parseRedisURL(v); err != nil {
			bad("REDIS_URL", redactURL(v), "not a Redis URL like redis://host:6379/0, or a Redis Cluster like redis://host1:6379,host2:6379,host3:6379 ("+err.Error()+")")
		} else {
			c.RedisURL = v
		}
	}
	if v, ok := get("CORS_ALLOWED_ORIGINS"); ok {
		origins, err := httpapi.ParseOrigins(v)
		if err != nil {
			errs = append(errs, err)
		}
		c.CORS.AllowedOrigins = origins
	}
	if v, ok := get("CORS_ALLOW_CREDENTIALS"); ok {
		b, err := strconv.ParseBool(v)
		switch {
		case err != nil:
			bad("CORS_ALLOW_CREDENTIALS", v, "not true or false")
		case b && slices.Contains(c.CORS.AllowedOrigins, "*"):
			bad("CORS_ALLOW_CREDENTIALS", v, `credentials cannot be allowed for every origin (CORS_ALLOWED_ORIGINS="*"); list the origins`)
		default:
			c.CORS.AllowCredentials = b
		}
	}
	if v, ok := get("TRUSTED_PROXIES"); ok {
		proxies, err := httpapi.ParseProxies(v)
		if err != nil {
			errs = append(errs, err)
		}
		c.TrustedProxies = proxies
	}
	positiveInt := func(name string, dst *int) {
		if v, ok := get(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				bad(name, v, "not a whole number greater than 0")
				return
			}
			*dst = n
		}
	}
	positiveInt("RATE_LIMIT_POINTS", &c.RateLimitPoints)
	if v, ok := get("DATABASE_READ_BATCHES"); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 1024 {
			bad("DATABASE_READ_BATCHES", v, "not a whole number from 0 (off) to 1024")
		} else {
			c.ReadBatches = n
		}
	}
	positiveInt("MAX_QUERY_COST", &c.MaxQueryCost)
	positiveInt("RATE_LIMIT_BAD_TOKENS_PER_IP", &c.RateLimitBadTokensPerIP)
	positiveInt("SUBSCRIPTION_MAX_PER_USER", &c.SubscriptionMaxPerUser)
	positiveInt("SUBSCRIPTION_MAX_CONNECTIONS", &c.SubscriptionMaxConnections)
	positiveInt("SUBSCRIPTION_MAX_PER_CLIENT", &c.SubscriptionMaxPerClient)
	duration := func(name string, dst *time.Duration, zeroOK bool) {
		if v, ok := get(name); ok {
			d, err := parseDuration(v)
			switch {
			case err != nil:
				bad(name, v, "not a duration like 90s, 15m, 24h or 30d")
			case d < 0 || d == 0 && !zeroOK:
				bad(name, v, "must be greater than 0")
			default:
				*dst = d
			}
		}
	}
	duration("RATE_LIMIT_WINDOW", &c.RateLimitWindow, false)
	if v, ok := get("RATE_LIMIT_LEASE"); ok {
		f, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil || f < 0 || f > 0.5:
			bad("RATE_LIMIT_LEASE", v, "not a fraction of the budget from 0 (leases off) to 0.5")
		case f == 0:
			c.RateLimitLease = -1
		default:
			c.RateLimitLease = f
		}
	}
	duration("IDEMPOTENCY_TTL", &c.IdempotencyTTL, false)
	duration("IDEMPOTENCY_WAIT", &c.IdempotencyWait, true)
	duration("SHUTDOWN_TIMEOUT", &c.ShutdownTimeout, false)
	if v, ok := get("REQUEST_TIMEOUT"); ok {
		if d, err := parseDuration(v); err != nil || d < minRequestTimeout || d > maxRequestTimeout {
			bad("REQUEST_TIMEOUT", v, fmt.Sprintf("not a duration from %s to %s (under the 60s timeouts of common proxies), like 30s",
				minRequestTimeout, maxRequestTimeout))
		} else {
			c.RequestTimeout = d
		}
	}
	duration("SUBSCRIPTION_KEEPALIVE", &c.SubscriptionKeepAlive, false)
	duration("SUBSCRIPTION_IDLE_TIMEOUT", &c.SubscriptionIdleTimeout, false)
	if v, ok := get("AUDIT_RETENTION"); ok && !strings.EqualFold(v, "forever") {
		duration("AUDIT_RETENTION", &c.AuditRetention, false)
	}
	if v, ok := get("AUDIT_SIGNING_KEY"); ok {
		key, err := audit.ParseSigningKey(v)
		if err != nil {
			bad("AUDIT_SIGNING_KEY", "(hidden)", err.Error()+` (make one with: openssl genpkey -algorithm ed25519 -outform DER | base64 -w0)`)
		}
		c.AuditSigningKey = key
	}
	boolean := func(name string, dst *bool) {
		if v, ok := get(name); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				bad(name, v, "not true or false")
				return
			}
			*dst = b
		}
	}
	boolean("WEBHOOK_ALLOW_HTTP", &c.Webhooks.AllowHTTP)
	boolean("WEBHOOK_ALLOW_PRIVATE", &c.Webhooks.AllowPrivate)
	duration("WEBHOOK_TIMEOUT", &c.Webhooks.Timeout, false)
	duration("WEBHOOK_RETRY_BASE", &c.Webhooks.RetryBase, false)
	positiveInt("WEBHOOK_WORKERS", &c.Webhooks.Workers)
	c.Tracing = tracing.ConfigFromEnv(get, bad)
	if v, ok := get("BLOB_URL"); ok {
		if u, err := url.Parse(v); err != nil || u.Scheme == "" {
			bad("BLOB_URL", redactURL(v), "not a URL like file:///var/lib/taskflow/blobs or s3://bucket?region=eu-west-1")
		} else {
			c.BlobURL = v
		}
	}
	byteSize := func(name string, dst *int64, lo, hi uint64) {
		if v, ok := get(name); ok {
			n, err := humanize.ParseBytes(v)
			switch {
			case err != nil:
				bad(name, v, "not a size like 25MiB, 1GiB or 26214400 (bytes)")
			case n < lo || n > hi:
				bad(name, v, fmt.Sprintf("must be from %s to %s", humanize.IBytes(lo), humanize.IBytes(hi)))
			default:
				*dst = int64(n)
			}
		}
	}
	byteSize("MAX_UPLOAD_SIZE", &c.MaxUploadSize, 1, maxUploadSizeLimit)
	positiveInt("AUDIT_EXPORT_WORKERS", &c.AuditExports.Workers)
	duration("AUDIT_EXPORT_TTL", &c.AuditExports.TTL, false)
	duration("AUDIT_EXPORT_TIMEOUT", &c.AuditExports.Timeout, false)
	byteSize("AUDIT_EXPORT_MAX_BYTES", &c.AuditExports.MaxBytes, 1, maxUploadSizeLimit)
	positiveInt("AUDIT_EXPORT_PER_DAY", &c.AuditExports.PerDay)
	positiveInt("AUDIT_EXPORT_AT_ONCE", &c.AuditExports.AtOnce)
	duration("AUDIT_EXPORT_TAKEOVER_AFTER", &c.AuditExports.TakeoverAfter, false)
	if v, set := get("AUDIT_EXPORT_TAKEOVER_AFTER"); !set {
		// The default leaves room for a short AUDIT_EXPORT_TIMEOUT.
		c.AuditExports.TakeoverAfter = min(c.AuditExports.TakeoverAfter, c.AuditExports.Timeout/2)
	} else if a := c.AuditExports; a.TakeoverAfter > 0 && (a.TakeoverAfter < minTakeoverAfter || a.TakeoverAfter > a.Timeout/2) {
		bad("AUDIT_EXPORT_TAKEOVER_AFTER", v, fmt.Sprintf("must be from %s to half of AUDIT_EXPORT_TIMEOUT (%s)",
			minTakeoverAfter, a.Timeout/2))
	}
	if points := ratelimit.UploadCost(c.MaxUploadSize); points > int64(c.RateLimitPoints) {
		if _, set := get("MAX_UPLOAD_SIZE"); set {
			bad("MAX_UPLOAD_SIZE", humanize.IBytes(uint64(c.MaxUploadSize)), fmt.Sprintf("an upload that large costs %d points "+
				"(one per %s), more than RATE_LIMIT_POINTS=%d: no one could send it", points,
				humanize.IBytes(ratelimit.UploadPointBytes), c.RateLimitPoints))
		} else {
			// The default shrinks to what a small budget can pay for.
			c.MaxUploadSize = int64(c.RateLimitPoints) * ratelimit.UploadPointBytes
		}
	}
	if v, ok := get("WORKSPACE_STORAGE_QUOTA"); ok && (v == "0" || strings.EqualFold(v, "none")) {
		c.WorkspaceStorageQuota = -1
	} else {
		byteSize("WORKSPACE_STORAGE_QUOTA", &c.WorkspaceStorageQuota, 1, math.MaxInt64)
	}
	duration("BLOB_SWEEP_GRACE", &c.BlobSweepGrace, false)
	intIn := func(name string, dst *int, lo, hi int) {
		if v, ok := get(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				bad(name, v, fmt.Sprintf("not a whole number from %d to %d", lo, hi))
				return
			}
			*dst = n
		}
	}
	intIn("MAX_UPLOADS_PER_USER", &c.MaxUploadsPerUser, 1, maxUploadsPerUserLimit)
	intIn("MAX_DOWNLOAD_RANGES", &c.MaxDownloadRanges, 1, maxDownloadRangesLimit)
	if v, ok := get("LOG_LEVEL"); ok {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad("LOG_LEVEL", v, "not one of debug, info, warn, error")
		}
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("bad configuration:\n  %w", joinLines(errs))
	}
	return c, nil
}

// parseDuration parses a Go duration ("90s", "1h30m") or a whole number of days
// ("30d").
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > 106751 {
			return 0, errors.New("bad number of days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// passwordParam matches the password of a key=value connection string.
var passwordParam = regexp.MustCompile(`password=('(\\.|[^'])*'|\S*)`)

// redactURL hides the password of a URL or key=value connection string for error
// messages.
func redactURL(s string) string {
	s = passwordParam.ReplaceAllString(s, "password=xxxxx")
	if i := strings.Index(s, "://"); i >= 0 {
		if at := strings.LastIndex(s, "@"); at > i {
			if colon := strings.Index(s[i+3:at], ":"); colon >= 0 {
				return s[:i+3+colon+1] + "xxxxx" + s[at:]
			}
		}
	}
	return s
}

// joinLines joins errors one per line, indented under the heading.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}
