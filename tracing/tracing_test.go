package tracing

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// parse runs ConfigFromEnv over the variables m and returns the Config and
// the bad values' messages.
func parse(m map[string]string) (Config, []string) {
	var errs []string
	c := ConfigFromEnv(func(name string) (string, bool) {
		v := strings.TrimSpace(m[name])
		return v, v != ""
	}, func(name, value, why string) { errs = append(errs, name+"="+value+": "+why) })
	return c, errs
}

func TestConfigOffUnlessAnEndpointIsSet(t *testing.T) {
	t.Parallel()
	for _, m := range []map[string]string{
		nil,
		{"OTEL_SERVICE_NAME": "taskflow-eu", "OTEL_TRACES_SAMPLER": "always_on"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces", "OTEL_TRACES_EXPORTER": "none"},
	} {
		c, errs := parse(m)
		if len(errs) > 0 || c.Enabled {
			t.Errorf("%v: enabled=%v errs=%v", m, c.Enabled, errs)
		}
	}
	for _, m := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example.com/v1/traces", "OTEL_SDK_DISABLED": "false"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
	} {
		c, errs := parse(m)
		if len(errs) > 0 || !c.Enabled {
			t.Errorf("%v: enabled=%v errs=%v", m, c.Enabled, errs)
		}
	}
}

func TestConfigProtocolAndSampler(t *testing.T) {
	t.Parallel()
	c, errs := parse(nil)
	if len(errs) > 0 || c.Protocol != ProtocolHTTPProtobuf || c.Sampler.Description() != sdktrace.ParentBased(sdktrace.AlwaysSample()).Description() {
		t.Fatalf("defaults: %+v %v", c, errs)
	}
	// The per-signal variable wins over the general one.
	c, _ = parse(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
	if c.Protocol != ProtocolHTTPJSON {
		t.Errorf("protocol = %q", c.Protocol)
	}
	for sampler, want := range map[string]sdktrace.Sampler{
		"always_on":                sdktrace.AlwaysSample(),
		"ALWAYS_OFF":               sdktrace.NeverSample(),
		"traceidratio":             sdktrace.TraceIDRatioBased(0.25),
		"parentbased_traceidratio": sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.25)),
		"parentbased_always_off":   sdktrace.ParentBased(sdktrace.NeverSample()),
	} {
		c, errs := parse(map[string]string{"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": "0.25"})
		if len(errs) > 0 || c.Sampler.Description() != want.Description() {
			t.Errorf("%s: %v %v, want %s", sampler, c.Sampler, errs, want.Description())
		}
	}
}

// (A bad value of each variable is in the table of the server's
// TestConfigBadValues.)
func TestConfigBadSamplerArgument(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"1.5", "-0.1", "half"} {
		_, errs := parse(map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": arg})
		if len(errs) != 1 || !strings.Contains(errs[0], "OTEL_TRACES_SAMPLER_ARG") {
			t.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: errs = %v", arg, errs)
		}
	}
}

// Tracing off hands back what it was given and instruments nothing.
func TestOffIsNothing(t *testing.T) {
	t.Parallel()
	p, err := Start(context.Background(), Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if p != nil || err != nil {
		t.Fatalf("Start(off) = %v, %v", p, err)
	}
	if p.TracerProvider() != nil || p.Shutdown(context.Background()) != nil {
		t.Fatal("a nil Provider is not off")
	}
	h := http.NotFoundHandler()
	if got := Handler(nil, h); reflect.ValueOf(got).Pointer() != reflect.ValueOf(h).Pointer() {
		t.Error("Handler(nil, h) is not h")
	}
	if Transport(nil, nil) != http.DefaultTransport {
		t.Error("Transport(nil, nil) is not http.DefaultTransport")
	}
	if PgxTracer(nil) != nil {
		t.Error("PgxTracer(nil) is not nil")
	}
	if err := InstrumentRedis(nil, nil); err != nil {
		t.Error(err)
	}
}

// recorder returns an SDK provider that keeps its ended spans in memory.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(NoOrphanClientSpans(sdktrace.ParentBased(sdktrace.AlwaysSample()))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// An outgoing request (a webhook) made inside a trace carries it in its
// traceparent header, with the client span as the parent.
func TestTransportPassesTheTraceOn(t *testing.T) {
	t.Parallel()
	tp, rec := recorder(t)
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	defer srv.Close()
	ctx, parent := tp.Tracer("test").Start(context.Background(), "job")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/hook", strings.NewReader("{}"))
	res, err := (&http.Client{Transport: Transport(tp, nil)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	parent.End()
	header := <-got
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	client := spans[0]
	if client.SpanKind() != trace.SpanKindClient || client.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("client span %s kind %v parent %v", client.Name(), client.SpanKind(), client.Parent().SpanID())
	}
	want := "00-" + parent.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"
	if header != want {
		t.Fatalf("traceparent = %q, want %q", header, want)
	}
}

// Client spans outside any trace (health probes' pings, background upkeep) are
// dropped; inside one they are sampled, and other root spans start traces.
func TestNoOrphanClientSpans(t *testing.T) {
	t.Parallel()
	tp, rec := recorder(t)
	tr := tp.Tracer("test")
	_, orphan := tr.Start(context.Background(), "PING", trace.WithSpanKind(trace.SpanKindClient))
	orphan.End()
	ctx, job := tr.Start(context.Background(), "job")
	_, child := tr.Start(ctx, "SELECT", trace.WithSpanKind(trace.SpanKindClient))
	child.End()
	job.End()
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if strings.Join(names, ",") != "SELECT,job" {
		t.Fatalf("spans = %v", names)
	}
	if orphan.SpanContext().IsSampled() || !child.SpanContext().IsSampled() {
		t.Fatal("sampling decisions")
	}
}
