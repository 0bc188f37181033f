// Package bench holds TaskFlow's benchmarks (speed is measured here, never
// asserted in tests).
package bench

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

// BenchmarkCheapQuery serves a cheap query through the whole handler (transport,
// auth middleware, parse, validation, execution) with the rate limiter off, in
// process, and on Redis. The budget is large enough never to refuse.
func BenchmarkCheapQuery(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := ratelimit.Config{Points: 1 << 30}
	queries := []struct {
		name, body string
		signedIn   bool
	}{
		// Touches nothing: the limiter's cost against the bare handler.
		{"typename", `{"query":"{ rateLimit: __typename a: __typename }"}`, false},
		// What a frontend polls: one token lookup, one field.
		{"me", `{"query":"{ me { id name } }"}`, true},
	}
	variants := []struct {
		name string
		opt  func(b *testing.B) apitest.Option
	}{
		{"off", func(*testing.B) apitest.Option { return func(o *httpapi.Options) { o.RateLimitOff = true } }},
		{"memory", func(b *testing.B) apitest.Option {
			lim, _ := ratelimit.New(ratelimit.Options{Config: cfg, Log: quiet})
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
		{"redis", func(b *testing.B) apitest.Option {
			lim, _ := ratelimit.New(ratelimit.Options{Config: cfg, Redis: ratelimittest.Redis(b),
				KeyPrefix: ratelimittest.Prefix(), Log: quiet})
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
	}
	for _, q := range queries {
		for _, v := range variants {
			b.Run(q.name+"/"+v.name, func(b *testing.B) {
				env := apitest.New(b, v.opt(b))
				auth := ""
				if q.signedIn {
					auth = "Bearer " + env.NewUser(b, "bench").Token
				}
				b.ReportAllocs()
				// 16 requests in flight at once (8 per CPU on this 2-core box), as
				// behind a load balancer: a Redis round trip then overlaps with
				// other requests' work, so what is measured is throughput.
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(q.body))
						req.Header.Set("Content-Type", "application/json")
						if auth != "" {
							req.Header.Set("Authorization", auth)
						}
						rec := httptest.NewRecorder()
						env.Handler.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK {
							b.Fatalf("status %d: %s", rec.Code, rec.Body)
						}
					}
				})
			})
		}
	}
}
