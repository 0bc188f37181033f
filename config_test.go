package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8080" || c.DatabaseURL != "" || c.RedisURL != "" ||
		len(c.CORS.AllowedOrigins) != 0 || c.CORS.AllowCredentials || len(c.TrustedProxies) != 0 ||
		c.RateLimitPoints != 1000 || c.RateLimitWindow != time.Minute || c.MaxQueryCost != 1000 ||
		c.IdempotencyTTL != 24*time.Hour || c.IdempotencyWait != 5*time.Second ||
		c.AuditRetention != 0 || c.ShutdownTimeout != 30*time.Second || c.LogLevel != slog.LevelInfo ||
		c.PprofAddr != "" || c.AuditSigningKey != nil || c.Tracing.Enabled ||
		c.BlobURL != "" || c.MaxUploadSize != 25<<20 || c.WorkspaceStorageQuota != 1<<30 ||
		c.BlobSweepGrace != time.Hour || c.SubscriptionMaxPerUser != 100 || c.SubscriptionMaxConnections != 10000 ||
		c.SubscriptionMaxPerClient != 200 || c.RateLimitBadTokensPerIP != 30 ||
		c.MaxUploadsPerUser != 16 || c.MaxDownloadRanges != 16 || c.RequestTimeout != 30*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(env(map[string]string{
		"HTTP_ADDR":                    "127.0.0.1:9000",
		"DATABASE_URL":                 "postgres://app:secret@db.internal:5433/taskflow?sslmode=require",
		"REDIS_URL":                    "redis://cache.internal:6380/2",
		"DATABASE_READ_BATCHES":        "6",
		"CORS_ALLOWED_ORIGINS":         "https://app.example.com, http://localhost:3000",
		"CORS_ALLOW_CREDENTIALS":       "true",
		"TRUSTED_PROXIES":              "10.0.0.0/8, 192.168.1.7",
		"RATE_LIMIT_POINTS":            "5000",
		"RATE_LIMIT_WINDOW":            "30s",
		"MAX_QUERY_COST":               "250",
		"RATE_LIMIT_LEASE":             "0.25",
		"IDEMPOTENCY_TTL":              "7d",
		"IDEMPOTENCY_WAIT":             "0s",
		"AUDIT_RETENTION":              "365d",
		"SHUTDOWN_TIMEOUT":             "5s",
		"REQUEST_TIMEOUT":              "12s",
		"LOG_LEVEL":                    "debug",
		"PPROF_ADDR":                   "127.0.0.1:6060",
		"METRICS_TOKEN":                "0123456789abcdef0123",
		"OTEL_EXPORTER_OTLP_ENDPOINT":  "http://collector:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL":  "grpc",
		"BLOB_URL":                     "s3://attachments?region=eu-west-1",
		"MAX_UPLOAD_SIZE":              "10MiB",
		"WORKSPACE_STORAGE_QUOTA":      "5 GB",
		"BLOB_SWEEP_GRACE":             "2s",
		"SUBSCRIPTION_MAX_PER_CLIENT":  "50",
		"RATE_LIMIT_BAD_TOKENS_PER_IP": "120",
		"MAX_UPLOADS_PER_USER":         "4",
		"MAX_DOWNLOAD_RANGES":          "1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Tracing.Enabled || c.Tracing.Protocol != "grpc" {
		t.Fatalf("tracing = %+v", c.Tracing)
	}
	if c.BlobURL != "s3://attachments?region=eu-west-1" || c.MaxUploadSize != 10<<20 || c.WorkspaceStorageQuota != 5e9 ||
		c.BlobSweepGrace != 2*time.Second || c.MaxUploadsPerUser != 4 || c.MaxDownloadRanges != 1 {
		t.Fatalf("attachments config = %+v", c)
	}
	if c.HTTPAddr != "127.0.0.1:9000" || c.DatabaseURL != "postgres://app:secret@db.internal:5433/taskflow?sslmode=require" ||
		c.RedisURL != "redis://cache.internal:6380/2" || c.RateLimitPoints != 5000 || c.RateLimitWindow != 30*time.Second ||
		c.MaxQueryCost != 250 || c.RateLimitLease != 0.25 || c.IdempotencyTTL != 7*24*time.Hour || c.IdempotencyWait != 0 ||
		c.AuditRetention != 365*24*time.Hour || c.ShutdownTimeout != 5*time.Second || c.LogLevel != slog.LevelDebug ||
		c.PprofAddr != "127.0.0.1:6060" || c.MetricsToken != "0123456789abcdef0123" || c.ReadBatches != 6 ||
		c.SubscriptionMaxPerClient != 50 || c.RateLimitBadTokensPerIP != 120 || c.RequestTimeout != 12*time.Second {
		t.Fatalf("config = %+v", c)
	}
	if strings.Join(c.CORS.AllowedOrigins, " ") != "https://app.example.com http://localhost:3000" || !c.CORS.AllowCredentials {
		t.Fatalf("CORS = %+v", c.CORS)
	}
	if len(c.TrustedProxies) != 2 || !c.TrustedProxies[0].Contains(netip.MustParseAddr("10.1.2.3")) ||
		!c.TrustedProxies[1].Contains(netip.MustParseAddr("192.168.1.7")) {
		t.Fatalf("TrustedProxies = %v", c.TrustedProxies)
	}
	// Unset, the store's default; 0 turns read batching off.
	if c, err = loadConfig(env(nil)); err != nil || c.ReadBatches != -1 {
		t.Fatalf("DATABASE_READ_BATCHES unset: %v %v", c.ReadBatches, err)
	}
	if c, err = loadConfig(env(map[string]string{"DATABASE_READ_BATCHES": "0"})); err != nil || c.ReadBatches != 0 {
		t.Fatalf("DATABASE_READ_BATCHES=0: %v %v", c.ReadBatches, err)
	}
	// 0 turns leases off.
	c, err = loadConfig(env(map[string]string{"RATE_LIMIT_LEASE": "0"}))
	if err != nil || c.RateLimitLease >= 0 {
		t.Fatalf("RATE_LIMIT_LEASE=0: %v %v", c.RateLimitLease, err)
	}
	// The audit signing key: the base64 of a seed, or a PKCS#8 PEM block.
	seed := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	want := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	der, _ := x509.MarshalPKCS8PrivateKey(want)
	for _, v := range []string{seed, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		base64.StdEncoding.EncodeToString(der)} {
		c, err = loadConfig(env(map[string]string{"AUDIT_SIGNING_KEY": v}))
		if err != nil || !want.Equal(c.AuditSigningKey) {
			t.Fatalf("AUDIT_SIGNING_KEY=%.20q...: %v", v, err)
		}
	}
	// 0 is no quota.
	c, err = loadConfig(env(map[string]string{"WORKSPACE_STORAGE_QUOTA": "0"}))
	if err != nil || c.WorkspaceStorageQuota >= 0 {
		t.Fatalf("WORKSPACE_STORAGE_QUOTA=0: %v %v", c.WorkspaceStorageQuota, err)
	}
	// "forever" is the default spelled out.
	c, err = loadConfig(env(map[string]string{"AUDIT_RETENTION": "forever"}))
	if err != nil || c.AuditRetention != 0 {
		t.Fatalf("AUDIT_RETENTION=forever: %v %v", c.AuditRetention, err)
	}
}

// AUDIT_EXPORT_*: the defaults, values read, and bad values refused with
// the variable named.
func TestConfigAuditExports(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (AuditExportConfig{Workers: 2, TTL: 24 * time.Hour, MaxBytes: 1 << 30, Timeout: time.Hour,
		PerDay: 10, AtOnce: 1, TakeoverAfter: 2 * time.Minute}); c.AuditExports != want {
		t.Fatalf("defaults = %+v, want %+v", c.AuditExports, want)
	}
	c, err = loadConfig(env(map[string]string{"AUDIT_EXPORT_WORKERS": "4", "AUDIT_EXPORT_TTL": "2h",
		"AUDIT_EXPORT_MAX_BYTES": "10MiB", "AUDIT_EXPORT_TIMEOUT": "30m", "AUDIT_EXPORT_PER_DAY": "50",
		"AUDIT_EXPORT_AT_ONCE": "3", "AUDIT_EXPORT_TAKEOVER_AFTER": "45s"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (AuditExportConfig{Workers: 4, TTL: 2 * time.Hour, MaxBytes: 10 << 20, Timeout: 30 * time.Minute,
		PerDay: 50, AtOnce: 3, TakeoverAfter: 45 * time.Second}); c.AuditExports != want {
		t.Fatalf("from the environment = %+v, want %+v", c.AuditExports, want)
	}
	for name, value := range map[string]string{
		"AUDIT_EXPORT_PER_DAY":        "0",
		"AUDIT_EXPORT_AT_ONCE":        "-1",
		"AUDIT_EXPORT_TAKEOVER_AFTER": "0s",
	} {
		if _, err := loadConfig(env(map[string]string{name: value})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v", name, value, err)
		}
	}
	// A takeover bound must leave room for a few heartbeats (every eighth
	// of it) and be well under a run's timeout.
	for _, e := range []map[string]string{{"AUDIT_EXPORT_TAKEOVER_AFTER": "5s"},
		{"AUDIT_EXPORT_TAKEOVER_AFTER": "1h", "AUDIT_EXPORT_TIMEOUT": "1h"}} {
		if _, err := loadConfig(env(e)); err == nil || !strings.Contains(err.Error(), "AUDIT_EXPORT_TAKEOVER_AFTER") {
			t.Errorf("%v: %v", e, err)
		}
	}
}

func TestConfigBadValues(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"HTTP_ADDR":                          "8080",
		"DATABASE_URL":                       "postgres://app:secret@db:notaport/x",
		"REDIS_URL":                          "http://cache:6379",
		"DATABASE_READ_BATCHES":              "-1",
		"CORS_ALLOWED_ORIGINS":               "app.example.com",
		"CORS_ALLOW_CREDENTIALS":             "maybe",
		"TRUSTED_PROXIES":                    "10.0.0.0/33",
		"RATE_LIMIT_POINTS":                  "lots",
		"RATE_LIMIT_WINDOW":                  "0s",
		"MAX_QUERY_COST":                     "-5",
		"RATE_LIMIT_BAD_TOKENS_PER_IP":       "0",
		"RATE_LIMIT_LEASE":                   "0.9",
		"IDEMPOTENCY_TTL":                    "1 day",
		"IDEMPOTENCY_WAIT":                   "-1s",
		"AUDIT_RETENTION":                    "never",
		"SHUTDOWN_TIMEOUT":                   "soon",
		"REQUEST_TIMEOUT":                    "0s",
		"LOG_LEVEL":                          "chatty",
		"PPROF_ADDR":                         "6060",
		"METRICS_TOKEN":                      "secret",
		"OTEL_SDK_DISABLED":                  "yes please",
		"OTEL_TRACES_EXPORTER":               "zipkin",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "collector:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector/v1/traces",
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "thrift",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http",
		"OTEL_TRACES_SAMPLER":                "jaeger_remote",
		"AUDIT_SIGNING_KEY":                  "c2VjcmV0", // base64 of "secret": not a key
		"BLOB_URL":                           "/var/lib/taskflow",
		"MAX_UPLOAD_SIZE":                    "3GiB",
		"WORKSPACE_STORAGE_QUOTA":            "lots",
		"BLOB_SWEEP_GRACE":                   "0s",
		"SUBSCRIPTION_MAX_PER_CLIENT":        "0",
		"MAX_UPLOADS_PER_USER":               "0",
		"MAX_DOWNLOAD_RANGES":                "many",
	} {
		_, err := loadConfig(env(map[string]string{name: value}))
		if err == nil {
			t.Errorf("%s=%q accepted", name, value)
			continue
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %q does not name the variable", name, value, err)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("%s: error shows the password: %q", name, err)
		}
	}
}

// MAX_UPLOADS_PER_USER and MAX_DOWNLOAD_RANGES are whole numbers from 1 to
// 1000; anything else is refused with the variable, the value and the range.
func TestConfigUploadAndRangeBounds(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"MAX_UPLOADS_PER_USER", "MAX_DOWNLOAD_RANGES"} {
		for _, v := range []string{"0", "-3", "1001", "2.5", "16 ranges", "0x10"} {
			_, err := loadConfig(env(map[string]string{name: v}))
			if err == nil || !strings.Contains(err.Error(), name+`="`+v+`": not a whole number from 1 to 1000`) {
				t.Errorf("%s=%q: %v", name, v, err)
			}
		}
		for v, want := range map[string]int{"1": 1, "1000": 1000, " 32 ": 32} {
			c, err := loadConfig(env(map[string]string{name: v}))
			got := c.MaxUploadsPerUser
			if name == "MAX_DOWNLOAD_RANGES" {
				got = c.MaxDownloadRanges
			}
			if err != nil || got != want {
				t.Errorf("%s=%q: %d, %v; want %d", name, v, got, err, want)
			}
		}
	}
}

// An upload of MAX_UPLOAD_SIZE must fit in the cost budget (a point per 64
// KiB): set to 25 MiB (400 points) with a budget of 100 points, it is refused;
// left unset, it shrinks to what the budget pays for (6.25 MiB), so that a
// configuration with a small budget still starts.
func TestConfigUploadFitsTheBudget(t *testing.T) {
	t.Parallel()
	_, err := loadConfig(env(map[string]string{"RATE_LIMIT_POINTS": "100", "MAX_UPLOAD_SIZE": "25MiB"}))
	if err == nil || !strings.Contains(err.Error(), "MAX_UPLOAD_SIZE") || !strings.Contains(err.Error(), "400 points") {
		t.Fatalf("RATE_LIMIT_POINTS=100 with MAX_UPLOAD_SIZE=25MiB: %v", err)
	}
	c, err := loadConfig(env(map[string]string{"RATE_LIMIT_POINTS": "100"}))
	if err != nil || c.MaxUploadSize != 100<<16 {
		t.Fatalf("RATE_LIMIT_POINTS=100, MAX_UPLOAD_SIZE unset: %d, %v", c.MaxUploadSize, err)
	}
}

func TestConfigReportsEveryBadValue(t *testing.T) {
	t.Parallel()
	_, err := loadConfig(env(map[string]string{"RATE_LIMIT_POINTS": "x", "MAX_QUERY_COST": "0", "HTTP_ADDR": "nope"}))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, name := range []string{"RATE_LIMIT_POINTS", "MAX_QUERY_COST", "HTTP_ADDR"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q lacks %s", err, name)
		}
	}
}

func TestConfigRefusesPprofOnHTTPAddr(t *testing.T) {
	t.Parallel()
	for _, e := range []map[string]string{
		{"PPROF_ADDR": ":8080"},
		{"HTTP_ADDR": "127.0.0.1:9000", "PPROF_ADDR": "127.0.0.1:9000"},
	} {
		if _, err := loadConfig(env(e)); err == nil || !strings.Contains(err.Error(), "PPROF_ADDR") {
			t.Errorf("%v: err = %v", e, err)
		}
	}
	// Port 0 picks a free port for each listener: two different ones.
	if c, err := loadConfig(env(map[string]string{"HTTP_ADDR": "127.0.0.1:0", "PPROF_ADDR": "127.0.0.1:0"})); err != nil || c.PprofAddr != "127.0.0.1:0" {
		t.Errorf("both on port 0: %+v %v", c, err)
	}
}

func TestConfigRefusesCredentialsForAnyOrigin(t *testing.T) {
	t.Parallel()
	_, err := loadConfig(env(map[string]string{"CORS_ALLOWED_ORIGINS": "*", "CORS_ALLOW_CREDENTIALS": "true"}))
	if err == nil || !strings.Contains(err.Error(), "CORS_ALLOW_CREDENTIALS") {
		t.Fatalf("err = %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://app:secret@db/x":      "postgres://app:xxxxx@db/x",
		"postgres://app@db/x":             "postgres://app@db/x",
		"host=db password=secret user=me": "host=db password=xxxxx user=me",
		"redis://:pw@cache:6379/0":        "redis://:xxxxx@cache:6379/0",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConnStringFallsBackToTCP(t *testing.T) {
	t.Parallel()
	if conn, source := connString("postgres://x@h/db", env(nil)); conn != "postgres://x@h/db" || source != "DATABASE_URL" {
		t.Fatalf("with DATABASE_URL: %q %q", conn, source)
	}
	// With PGHOST set, libpq's choice stands untouched.
	if conn, _ := connString("", env(map[string]string{"PGHOST": "db.internal"})); conn != "" {
		t.Fatalf("with PGHOST: %q", conn)
	}
	conn, source := connString("", env(nil))
	if conn != "" && (!strings.HasPrefix(conn, "host=/") || !strings.HasSuffix(conn, ",127.0.0.1")) {
		t.Fatalf("no DATABASE_URL: %q", conn)
	}
	if !strings.Contains(source, "DATABASE_URL is unset") {
		t.Fatalf("source = %q", source)
	}
}

// The test binaries start the server without any variable it reads
// (apitest.CleanEnv): that list must name every variable loadConfig reads.
func TestCleanEnvDropsEveryServerVariable(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	if _, err := loadConfig(func(name string) string { read[name] = true; return "" }); err != nil {
		t.Fatal(err)
	}
	dropped := map[string]bool{}
	for _, n := range apitest.ServerVariables() {
		dropped[n] = true
	}
	for n := range read {
		if !dropped[n] {
			t.Errorf("loadConfig reads %s, which apitest.CleanEnv does not drop", n)
		}
	}
	for n := range dropped {
		if !read[n] {
			t.Errorf("apitest.CleanEnv drops %s, which loadConfig does not read", n)
		}
	}
}

// TestConfigurationTableMatchesConfig keeps the table of variables in
// docs/configuration.md equal to what the server reads (loadConfig, and GOGC in
// setGCPercent), in both directions.
func TestConfigurationTableMatchesConfig(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Variables TaskFlow reads\n")
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	if len(documented) == 0 {
		t.Fatal("no table under '## Variables TaskFlow reads' in docs/configuration.md")
	}
	read := map[string]bool{}
	if _, err := loadConfig(func(name string) string { read[name] = true; return "" }); err != nil {
		t.Fatal(err)
	}
	setGCPercent(func(name string) string { read[name] = true; return "100" }) // "100": leaves the runtime's target as it is
	for n := range read {
		if !documented[n] {
			t.Errorf("the server reads %s, which docs/configuration.md does not list", n)
		}
	}
	for n := range documented {
		if !read[n] {
			t.Errorf("docs/configuration.md lists %s, which the server does not read", n)
		}
	}
}

// REQUEST_TIMEOUT is a duration from 100ms to 50s: zero or negative would
// fail every operation, and past 50 s a proxy's usual 60 s timeout would
// answer 504 first; each refusal names the variable, the value and the range.
func TestConfigRequestTimeoutBounds(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "0s", "-5s", "50ms", "1ns", "51s", "1h", "30d", "soon", "30"} {
		_, err := loadConfig(env(map[string]string{"REQUEST_TIMEOUT": v}))
		if err == nil {
			t.Errorf("REQUEST_TIMEOUT=%q accepted", v)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `REQUEST_TIMEOUT="`+v+`"`) || !strings.Contains(msg, "from 100ms to 50s") {
			t.Errorf("REQUEST_TIMEOUT=%q: error %q does not name the variable, the value and the range", v, msg)
		}
	}
	for v, want := range map[string]time.Duration{"100ms": 100 * time.Millisecond, "5s": 5 * time.Second, "50s": 50 * time.Second} {
		c, err := loadConfig(env(map[string]string{"REQUEST_TIMEOUT": v}))
		if err != nil || c.RequestTimeout != want {
			t.Errorf("REQUEST_TIMEOUT=%q: %v %v, want %v", v, c.RequestTimeout, err, want)
		}
	}
}
