// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables and instruments what TaskFlow talks to: incoming HTTP
// (otelhttp), Postgres (otelpgx), Redis (redisotel) and outgoing HTTP.
//
// Tracing is off unless an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Off means no SDK at all: Start returns a
// nil *Provider, whose TracerProvider is nil, and every helper here then hands
// back what it was given (the handler, the transport) or nothing (no pgx
// tracer, no Redis hook), so that no span is made and nothing is allocated for
// tracing on any request.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES names the service otherwise.
const DefaultServiceName = "taskflow"

// Propagator reads and writes the W3C trace context (traceparent, tracestate)
// and W3C baggage headers: of incoming requests (Handler) and outgoing ones
// (Transport).
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolHTTPJSON     = "http/json"
	ProtocolGRPC         = "grpc"
)

// Config is the part of the OTEL_* configuration that TaskFlow reads itself to
// decide whether to trace and how; the exporter and the resource read the rest
// (headers, timeout, compression, certificates, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*) from the environment themselves.
type Config struct {
	// Enabled is true when an OTLP endpoint is set and neither
	// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns tracing off.
	Enabled bool
	// Protocol is the OTLP protocol (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL): http/protobuf (the default), http/json or grpc.
	Protocol string
	// Sampler is the sampler of OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG,
	// parentbased_always_on by default.
	Sampler sdktrace.Sampler
}

// ConfigFromEnv reads the Config's variables (OTEL_SDK_DISABLED,
// OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG) through get, which returns a variable's trimmed
// value and whether it is set, and reports every bad value through bad with
// the variable's name, so that the server refuses to start rather than trace
// differently from what was asked (the configuration loader of main passes its
// own get and bad).
func ConfigFromEnv(get func(name string) (string, bool), bad func(name, value, why string)) Config {
	c := Config{Protocol: ProtocolHTTPProtobuf}

	disabled := false
	if v, ok := get("OTEL_SDK_DISABLED"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad("OTEL_SDK_DISABLED", v, "not true or false")
		}
		disabled = b
	}
	if v, ok := get("OTEL_TRACES_EXPORTER"); ok {
		switch strings.ToLower(v) {
		case "otlp":
		case "none":
			disabled = true
		default:
			bad("OTEL_TRACES_EXPORTER", v, "only otlp (the default) and none are supported")
		}
	}
	endpoint := false
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v, ok := get(name); ok {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(name, v, "not a URL like http://collector:4318 (https:// for TLS)")
				continue
			}
			endpoint = true
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v, ok := get(name); ok {
			switch v {
			case ProtocolHTTPProtobuf, ProtocolHTTPJSON, ProtocolGRPC:
				c.Protocol = v // the TRACES_ variable, read last, wins
			default:
				bad(name, v, "not one of http/protobuf, http/json, grpc")
			}
		}
	}
	sampler, _ := get("OTEL_TRACES_SAMPLER")
	sampler = strings.ToLower(sampler)
	arg, _ := get("OTEL_TRACES_SAMPLER_ARG")
	ratio := func() sdktrace.Sampler {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1)
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			bad("OTEL_TRACES_SAMPLER_ARG", arg, "not a sampling ratio from 0 to 1")
			return nil
		}
		return sdktrace.TraceIDRatioBased(f)
	}
	switch sampler {
	case "", "parentbased_always_on":
		c.Sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "always_on":
		c.Sampler = sdktrace.AlwaysSample()
	case "always_off":
		c.Sampler = sdktrace.NeverSample()
	case "parentbased_always_off":
		c.Sampler = sdktrace.ParentBased(sdktrace.NeverSample())
	case "traceidratio":
		c.Sampler = ratio()
	case "parentbased_traceidratio":
		if r := ratio(); r != nil {
			c.Sampler = sdktrace.ParentBased(r)
		}
	default:
		bad("OTEL_TRACES_SAMPLER", sampler, "not one of always_on, always_off, traceidratio, "+
			"parentbased_always_on (the default), parentbased_always_off, parentbased_traceidratio")
	}
	c.Enabled = endpoint && !disabled
	return c
}

// Provider is the tracer provider of a server with tracing on. A nil *Provider
// is tracing off: its methods do nothing.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// Start returns the Provider of cfg, which exports to the OTLP endpoint in
// batches, and makes it (and Propagator) the process's global one, for code
// that uses otel.Tracer. It returns nil when cfg is not Enabled. Errors of the
// SDK after the start (an export that failed) are logged as warnings.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	case ProtocolHTTPJSON:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	default:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceInstanceID(uuid.NewString())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the above
	)
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES: the rest of the resource stands.
		log.Warn("OpenTelemetry resource is incomplete", "err", err)
	}
	sampler := cfg.Sampler
	if sampler == nil {
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(NoOrphanClientSpans(sampler)),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry", "err", err)
	}))
	log.Info("tracing on: exporting spans over OTLP", "protocol", cfg.Protocol, "sampler", sampler.Description())
	return &Provider{sdk: tp}, nil
}

// TracerProvider returns the SDK's provider, or nil (an untyped nil interface)
// when p is nil.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.sdk
}

// Shutdown exports the spans still buffered and stops the exporter, within ctx.
// It does nothing for a nil p, and nothing a second time.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// NoOrphanClientSpans wraps a sampler so that a client span (a Postgres
// statement, a Redis command, an outgoing HTTP call) made outside any trace is
// dropped instead of starting a trace of its own: health probes and background
// upkeep (rate-limit leases, pool pings) would otherwise each be a one-span
// trace. Work that should be traced on its own starts a span first (a job
// worker's run, for example), and its client spans are then sampled with it.
func NoOrphanClientSpans(s sdktrace.Sampler) sdktrace.Sampler { return noOrphanClients{s} }

type noOrphanClients struct{ next sdktrace.Sampler }

// ShouldSample drops a client span without a parent and asks the wrapped
// sampler about every other span.
func (s noOrphanClients) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Kind == trace.SpanKindClient && !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return s.next.ShouldSample(p)
}

// Description names the sampler.
func (s noOrphanClients) Description() string {
	return "NoOrphanClientSpans{" + s.next.Description() + "}"
}

// untraced are the routes whose requests get no span: probes and scrapes,
// which would otherwise be most of the traces.
func untraced(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics")
}

// Handler wraps next in the HTTP server span of every request (but the health
// probes and metrics scrapes), continuing the trace of the request's
// traceparent header. With tp nil it returns next itself.
func Handler(tp trace.TracerProvider, next http.Handler) http.Handler {
	if tp == nil {
		return next
	}
	return otelhttp.NewHandler(next, "taskflow",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(Propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // metrics are Prometheus's
		otelhttp.WithFilter(func(r *http.Request) bool { return !untraced(r) }),
	)
}

// Transport wraps base (nil: http.DefaultTransport) for outgoing requests,
// such as webhooks: each request gets a client span and carries the current
// trace in its traceparent header. With tp nil it returns base itself.
func Transport(tp trace.TracerProvider, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if tp == nil {
		return base
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(Propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

// PgxTracer returns the pgx tracer that makes a span of every statement, batch,
// connection and pool acquire inside a trace (statement text, never the
// argument values), or nil with tp nil. Set it as the pool's
// ConnConfig.Tracer.
func PgxTracer(tp trace.TracerProvider) pgx.QueryTracer {
	if tp == nil {
		return nil
	}
	return otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tp),
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

// InstrumentRedis adds a span of every Redis command and pipeline to rdb: the
// command's name without its arguments (keys hold client IPs and user ids,
// values persisted query texts). With tp or rdb nil it does nothing.
func InstrumentRedis(tp trace.TracerProvider, rdb redis.UniversalClient) error {
	if tp == nil || rdb == nil {
		return nil
	}
	if err := redisotel.InstrumentTracing(rdb,
		redisotel.WithTracerProvider(tp),
		redisotel.WithDBStatement(false),
		// The caller's file and line cost a stack walk on every command.
		redisotel.WithCallerEnabled(false),
	); err != nil {
		return fmt.Errorf("instrument Redis: %w", err)
	}
	return nil
}
