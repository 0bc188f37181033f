// Package bench holds TaskFlow's benchmarks (speed is measured here, never
// asserted in tests).
package bench

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

// BenchmarkCheapQuery serves a cheap query through the whole handler (transport,
// auth middleware, parse, validation, execution) with the rate limiter off, in
// process, on Redis with leases (the default) and on Redis with a check per
// operation (RATE_LIMIT_LEASE=0). The budget is large enough never to refuse.
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
		{"off", func(*testing.B) apitest.Option { return func(*httpapi.Options) {} }},
		{"memory", func(b *testing.B) apitest.Option {
			lim, _ := ratelimit.New(ratelimit.Options{Config: cfg, Log: quiet})
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
		// The default: a busy user's checks are answered from a lease.
		{"redis", func(b *testing.B) apitest.Option {
			lim, _ := ratelimit.New(ratelimit.Options{Config: cfg, Redis: ratelimittest.Redis(b),
				KeyPrefix: ratelimittest.Prefix(), Log: quiet})
			b.Cleanup(lim.Close)
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
		// RATE_LIMIT_LEASE=0: one Redis script per operation.
		{"redis-exact", func(b *testing.B) apitest.Option {
			c := cfg
			c.Lease = -1
			lim, _ := ratelimit.New(ratelimit.Options{Config: c, Redis: ratelimittest.Redis(b),
				KeyPrefix: ratelimittest.Prefix(), Log: quiet})
			b.Cleanup(lim.Close)
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
	}
	for _, q := range queries {
		for _, v := range variants {
			b.Run(q.name+"/"+v.name, func(b *testing.B) {
				env := apitest.NewUnguarded(b, without(v.name), v.opt(b))
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

// BenchmarkLimiterOverhead is BenchmarkCheapQuery's comparison made robust
// against a shared machine: for each cheap query it runs the four limiter
// variants in alternating rounds (the order rotates every round), 16 requests
// in flight, and reports each variant's median throughput and what the limiter
// costs against "off". Run it with -benchtime=1x; BENCH_ROUNDS and BENCH_ROUND
// (a duration) tune it.
func BenchmarkLimiterOverhead(b *testing.B) {
	rounds, round := alternatingRounds(8, time.Second)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := ratelimit.Config{Points: 1 << 30}
	limiter := func(b *testing.B, lease float64, redis bool) *ratelimit.Limiter {
		c := cfg
		c.Lease = lease
		o := ratelimit.Options{Config: c, Log: quiet}
		if redis {
			o.Redis, o.KeyPrefix = ratelimittest.Redis(b), ratelimittest.Prefix()
		}
		lim, err := ratelimit.New(o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(lim.Close)
		return lim
	}
	variants := []struct {
		name string
		opt  func(b *testing.B) apitest.Option
	}{
		{"off", func(*testing.B) apitest.Option { return func(*httpapi.Options) {} }},
		{"memory", func(b *testing.B) apitest.Option {
			lim := limiter(b, 0, false)
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
		{"redis", func(b *testing.B) apitest.Option {
			lim := limiter(b, 0, true)
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
		{"redis-exact", func(b *testing.B) apitest.Option {
			lim := limiter(b, -1, true)
			return func(o *httpapi.Options) { o.Limiter = lim }
		}},
	}
	queries := []struct {
		name, body string
		signedIn   bool
	}{
		{"typename", `{"query":"{ rateLimit: __typename a: __typename }"}`, false},
		{"me", `{"query":"{ me { id name } }"}`, true},
	}
	for range b.N {
		for _, q := range queries {
			type served struct {
				h    http.Handler
				auth string
			}
			handlers := make([]served, len(variants))
			for i, v := range variants {
				env := apitest.NewUnguarded(b, without(v.name), v.opt(b))
				handlers[i].h = env.Handler
				if q.signedIn {
					handlers[i].auth = "Bearer " + env.NewUser(b, "bench").Token
				}
			}
			run := func(s served) float64 {
				var done atomic.Int64
				stop := time.Now().Add(round)
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for time.Now().Before(stop) {
							req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(q.body))
							req.Header.Set("Content-Type", "application/json")
							if s.auth != "" {
								req.Header.Set("Authorization", s.auth)
							}
							rec := httptest.NewRecorder()
							s.h.ServeHTTP(rec, req)
							if rec.Code != http.StatusOK {
								b.Errorf("status %d: %s", rec.Code, rec.Body)
								return
							}
							done.Add(1)
						}
					})
				}
				start := time.Now()
				wg.Wait()
				return float64(done.Load()) / time.Since(start).Seconds()
			}
			for _, s := range handlers { // warm up
				run(s)
			}
			got := make([][]float64, len(variants))
			for r := range rounds {
				for k := range variants {
					i := (k + r) % len(variants)
					got[i] = append(got[i], run(handlers[i]))
				}
			}
			off := median(got[0])
			for i, v := range variants {
				m := median(got[i])
				b.ReportMetric(m, q.name+"/"+v.name+"-ops/s")
				if i > 0 {
					b.ReportMetric(100*(off-m)/off, q.name+"/"+v.name+"-cost-%")
				}
				b.Logf("%s/%s: median %.0f ops/s, rounds %.0f", q.name, v.name, m, got[i])
			}
		}
	}
}

// without is what the limiter variant name leaves out of the handler: the
// rate limiter for "off", nothing for the others.
func without(variant string) []httpapi.Guard {
	if variant == "off" {
		return []httpapi.Guard{httpapi.GuardRateLimit}
	}
	return nil
}
