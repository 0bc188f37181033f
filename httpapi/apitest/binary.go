package apitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// Binary returns the path of the taskflow server binary (the module's main
// package, as `go run .` serves it), built once per test process, for tests
// that start real server processes.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "taskflow-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "taskflow")
		if out, err := exec.Command("go", "build", "-o", binPath, "taskflow").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveBinary deletes what Binary built, and the data directory of CleanEnv;
// call it from TestMain after m.Run.
func RemoveBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if dataDir != "" {
		os.RemoveAll(dataDir)
	}
}

var (
	dataOnce sync.Once
	dataDir  string
)

// userDataDir returns a directory made once per test process, which CleanEnv
// gives the server as XDG_DATA_HOME: a server started without BLOB_URL keeps
// its attachments there, not in the home directory of whoever runs the tests.
func userDataDir() string {
	dataOnce.Do(func() {
		d, err := os.MkdirTemp("", "taskflow-data-")
		if err == nil {
			dataDir = d
		}
	})
	return dataDir
}

// serverVariables are the environment variables the server reads (config.go).
var serverVariables = map[string]bool{
	"HTTP_ADDR": true, "DATABASE_URL": true, "DATABASE_READ_BATCHES": true, "REDIS_URL": true, "CORS_ALLOWED_ORIGINS": true,
	"CORS_ALLOW_CREDENTIALS": true, "TRUSTED_PROXIES": true, "RATE_LIMIT_POINTS": true,
	"RATE_LIMIT_WINDOW": true, "RATE_LIMIT_LEASE": true, "RATE_LIMIT_BAD_TOKENS_PER_IP": true, "MAX_QUERY_COST": true, "IDEMPOTENCY_TTL": true,
	"IDEMPOTENCY_WAIT": true, "AUDIT_RETENTION": true, "SHUTDOWN_TIMEOUT": true, "REQUEST_TIMEOUT": true, "LOG_LEVEL": true,
	"PPROF_ADDR": true, "METRICS_TOKEN": true, "AUDIT_SIGNING_KEY": true,
	"SUBSCRIPTION_MAX_PER_USER": true, "SUBSCRIPTION_MAX_CONNECTIONS": true, "SUBSCRIPTION_MAX_PER_CLIENT": true, "SUBSCRIPTION_KEEPALIVE": true,
	"SUBSCRIPTION_IDLE_TIMEOUT": true,
	// Webhooks.
	"WEBHOOK_ALLOW_HTTP": true, "WEBHOOK_ALLOW_PRIVATE": true, "WEBHOOK_TIMEOUT": true, "WEBHOOK_RETRY_BASE": true,
	"WEBHOOK_WORKERS": true,
	// OpenTelemetry (tracing.ConfigFromEnv).
	"OTEL_SDK_DISABLED": true, "OTEL_TRACES_EXPORTER": true, "OTEL_EXPORTER_OTLP_ENDPOINT": true,
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": true, "OTEL_EXPORTER_OTLP_PROTOCOL": true,
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": true, "OTEL_TRACES_SAMPLER": true, "OTEL_TRACES_SAMPLER_ARG": true,
	"BLOB_URL": true, "MAX_UPLOAD_SIZE": true, "WORKSPACE_STORAGE_QUOTA": true, "BLOB_SWEEP_GRACE": true,
	"MAX_UPLOADS_PER_USER": true, "MAX_DOWNLOAD_RANGES": true,
	"AUDIT_EXPORT_WORKERS": true, "AUDIT_EXPORT_TTL": true, "AUDIT_EXPORT_MAX_BYTES": true, "AUDIT_EXPORT_TIMEOUT": true,
	"AUDIT_EXPORT_PER_DAY": true, "AUDIT_EXPORT_AT_ONCE": true, "AUDIT_EXPORT_TAKEOVER_AFTER": true,
}

// ServerVariables returns the names of the environment variables the server
// reads, which CleanEnv drops.
func ServerVariables() []string {
	names := make([]string, 0, len(serverVariables))
	for n := range serverVariables {
		names = append(names, n)
	}
	return names
}

// CleanEnv returns the test process's environment without the variables the
// server reads, for starting the Binary with only the settings a test gives it:
// those of ServerVariables, and every OTEL_* variable, which the OpenTelemetry
// SDK reads itself (a developer's OTEL_EXPORTER_OTLP_HEADERS must not reach a
// test's server); XDG_DATA_HOME is set to a directory of the test process
// (removed by RemoveBinary), where a server without BLOB_URL keeps attachments.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !serverVariables[name] && !strings.HasPrefix(name, "OTEL_") && name != "XDG_DATA_HOME" {
			env = append(env, kv)
		}
	}
	if d := userDataDir(); d != "" {
		env = append(env, "XDG_DATA_HOME="+d)
	}
	return env
}
