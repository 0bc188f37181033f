package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

func TestHealthzShowsInProcessRateLimiting(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	code, b := getHealth(t, env.Handler)
	if code != http.StatusOK || b.Status != "ok" || !b.Redis.OK || b.Redis.Mode != "memory" || b.Redis.Error != "" {
		t.Fatalf("healthz = %d %+v, want 200 ok with redis memory", code, b)
	}
}

func TestHealthzFollowsTheLimiterThroughARedisOutage(t *testing.T) {
	t.Parallel()
	redisSrv := ratelimittest.StartRedis(t)
	lim, err := ratelimit.New(ratelimit.Options{Redis: redisSrv.Client(), KeyPrefix: ratelimittest.Prefix(), Log: quiet,
		Registerer: prometheus.NewRegistry(), ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	env := apitest.New(t, func(o *httpapi.Options) { o.Limiter = lim })

	code, b := getHealth(t, env.Handler)
	if code != http.StatusOK || b.Status != "ok" || !b.Redis.OK || b.Redis.Mode != "redis" {
		t.Fatalf("with Redis: %d %+v", code, b)
	}

	// Killed with no traffic since: /healthz finds out by itself.
	redisSrv.Stop()
	code, b = getHealth(t, env.Handler)
	if code != http.StatusOK || b.Status != "degraded" || b.Redis.OK || b.Redis.Mode != "memory-fallback" || b.Redis.Error == "" {
		t.Fatalf("with Redis down: %d %+v, want 200 degraded memory-fallback", code, b)
	}
	if strings.Contains(b.Redis.Error, "127.0.0.1") || strings.Contains(b.Redis.Error, "dial") {
		t.Fatalf("the error shows internals: %q", b.Redis.Error)
	}
	if st := lim.Status(); st.Backend != "memory-fallback" {
		t.Fatalf("limiter status %+v", st)
	}

	redisSrv.Start()
	eventually(t, 2*time.Minute, "back to Redis", lim.Healthy)
	code, b = getHealth(t, env.Handler)
	if code != http.StatusOK || b.Status != "ok" || !b.Redis.OK || b.Redis.Mode != "redis" || b.Redis.Error != "" {
		t.Fatalf("after recovery: %d %+v", code, b)
	}
}

func TestHealthz503OnlyForPostgres(t *testing.T) {
	t.Parallel()
	h := offlineHandler(t, httpapi.Options{Limiter: apitest.Unlimited()})
	code, b := getHealth(t, h)
	if code != http.StatusServiceUnavailable || b.Status != "unavailable" || b.Redis.Mode != "memory" || !b.Redis.OK {
		t.Fatalf("healthz = %d %+v, want 503 with redis memory ok", code, b)
	}
}
