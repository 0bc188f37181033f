package bench

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store"
	"taskflow/store/storetest"
	"taskflow/tracing"
)

// discard is a span exporter that drops what it is given: the SDK's batching
// and encoding-free export path without a network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTaskByIDTracing is BenchmarkTaskByID with tracing off (nil
// provider, as without OTEL_EXPORTER_OTLP_ENDPOINT), on with every trace
// sampled (the SDK's batch processor into an exporter that drops the spans:
// the server-side cost without the network), and on with no trace sampled
// (OTEL_TRACES_SAMPLER=always_off: what a low sampling ratio costs the
// requests it does not sample). The pool has the server's pgx tracer when
// tracing is on, as in the server.
func BenchmarkTaskByIDTracing(b *testing.B) {
	for _, v := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{
		{"off", nil},
		{"sampled", sdktrace.AlwaysSample()},
		{"unsampled", sdktrace.NeverSample()},
	} {
		b.Run(v.name, func(b *testing.B) {
			var tp *sdktrace.TracerProvider
			pc, err := pgxpool.ParseConfig(storetest.URL(b))
			if err != nil {
				b.Fatal(err)
			}
			if v.sampler != nil {
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}),
					sdktrace.WithSampler(tracing.NoOrphanClientSpans(sdktrace.ParentBased(v.sampler))))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				pc.ConnConfig.Tracer = tracing.PgxTracer(tp)
			}
			pool, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			env := apitest.New(b, func(o *httpapi.Options) {
				o.DB = store.New(pool, nil)
				if tp != nil {
					o.Tracing = tp
				}
			})
			serve := taskByID(b, env)
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				serve(env.Handler)
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
