package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/reqinfo"
	"taskflow/tracing"
)

// The incoming trace of the tests' traceparent header.
const (
	incomingTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingParent = "00f067aa0ba902b7"
	traceparent    = "00-" + incomingTrace + "-" + incomingParent + "-01"
)

// tracingSetup is a handler with tracing on, its spans and its JSON log.
type tracingSetup struct {
	env  *apitest.Env
	rec  *tracetest.SpanRecorder
	logs *syncBuffer
}

func newTracingSetup(t *testing.T) *tracingSetup {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(tracing.NoOrphanClientSpans(sdktrace.ParentBased(sdktrace.AlwaysSample()))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	logs := &syncBuffer{}
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Tracing = tp
		o.Log = slog.New(httpapi.LogHandler(slog.NewJSONHandler(logs, nil)))
	})
	return &tracingSetup{env: env, rec: rec, logs: logs}
}

// post serves one GraphQL request in process (the spans have ended when it
// returns) with the given headers and returns its decoded body.
func (s *tracingSetup) post(t *testing.T, token, query string, vars map[string]any, headers ...string) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	apitest.SetHeaders(req, token, headers...)
	rec := serve(s.env.Handler, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return out
}

// spans returns the ended spans of trace, by name (the names in a test are distinct).
func (s *tracingSetup) spans(trace string) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range s.rec.Ended() {
		if sp.SpanContext().TraceID().String() == trace {
			out[sp.Name()] = sp
		}
	}
	return out
}

// attrs returns a span's attributes as a map.
func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// A request with a traceparent continues that trace: the HTTP server span is a
// child of the incoming parent, the GraphQL operation span (named, typed,
// priced, with its outcome) a child of it, the root field's span a child of
// that; the log lines of the request and the audit event of the mutation carry
// the trace id.
func TestTracingContinuesTheIncomingTrace(t *testing.T) {
	t.Parallel()
	s := newTracingSetup(t)
	u := s.env.NewUser(t, "Tracer")
	out := s.post(t, u.Token, `mutation NewWorkspace { createWorkspace(input: {name: "Traced"}) { id } }`, nil,
		"traceparent", traceparent, "X-Request-ID", "traced-1")
	ws, _ := out["data"].(map[string]any)["createWorkspace"].(map[string]any)["id"].(string)
	if ws == "" {
		t.Fatalf("createWorkspace: %v", out)
	}

	spans := s.spans(incomingTrace)
	server, op, field := spans["POST /query"], spans["mutation NewWorkspace"], spans["Mutation.createWorkspace"]
	if server == nil || op == nil || field == nil || len(spans) != 3 {
		t.Fatalf("spans of the trace: %v (fields below the root get none)", spans)
	}
	if server.SpanKind() != trace.SpanKindServer || !server.Parent().IsRemote() || server.Parent().SpanID().String() != incomingParent {
		t.Errorf("server span: kind %v, parent %v", server.SpanKind(), server.Parent())
	}
	if a := attrs(server); a["http.route"].AsString() != "/query" || a["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("server span attributes: %v", server.Attributes())
	}
	if op.Parent().SpanID() != server.SpanContext().SpanID() || field.Parent().SpanID() != op.SpanContext().SpanID() {
		t.Errorf("parents: op under %v (server %v), field under %v (op %v)", op.Parent().SpanID(),
			server.SpanContext().SpanID(), field.Parent().SpanID(), op.SpanContext().SpanID())
	}
	a := attrs(op)
	if a["graphql.operation.type"].AsString() != "mutation" || a["graphql.operation.name"].AsString() != "NewWorkspace" ||
		a["taskflow.graphql.cost"].AsInt64() <= 0 || a["taskflow.graphql.outcome"].AsString() != "ok" || op.Status().Code != codes.Unset {
		t.Errorf("operation span attributes: %v, status %v", op.Attributes(), op.Status())
	}
	if _, ok := a["graphql.document"]; ok {
		t.Error("the document is recorded")
	}

	// The access log line: the trace and the server span.
	var line map[string]any
	for _, l := range s.logs.lines(t) {
		if l["msg"] == "request" && l["request_id"] == "traced-1" {
			line = l
		}
	}
	if line["trace_id"] != incomingTrace || line["span_id"] != server.SpanContext().SpanID().String() {
		t.Errorf("access log line: %v", line)
	}

	// The audit event of the mutation.
	var traceID *string
	if err := s.env.DB.Pool.QueryRow(t.Context(), `SELECT trace_id FROM audit_events WHERE request_id = 'traced-1'`).Scan(&traceID); err != nil {
		t.Fatal(err)
	}
	if traceID == nil || *traceID != incomingTrace {
		t.Errorf("audit event trace_id = %v", traceID)
	}
	// And through the API.
	out = s.post(t, u.Token, `query($ws: ID!) { auditEvents(workspaceId: $ws) { nodes { action requestId traceId } } }`,
		map[string]any{"ws": ws})
	if !strings.Contains(mustJSON(out), `{"action":"workspace.created","requestId":"traced-1","traceId":"`+incomingTrace+`"}`) {
		t.Errorf("auditEvents: %s", mustJSON(out))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A request without a traceparent starts a trace of its own; failed operations
// say why in their outcome and error.type, and only INTERNAL is an error status.
func TestTracingOutcomes(t *testing.T) {
	t.Parallel()
	s := newTracingSetup(t)
	u := s.env.NewUser(t, "Tracer")
	for _, c := range []struct {
		query, span, outcome string
	}{
		{`query Broken { workspace(`, "GraphQL Operation", "GRAPHQL_PARSE_FAILED"},
		{`query Unknown { nothing }`, "GraphQL Operation", "GRAPHQL_VALIDATION_FAILED"},
		{`query Missing { workspace(id: "00000000-0000-0000-0000-000000000000") { id } }`, "query Missing", "NOT_FOUND"},
		{`mutation Empty { createWorkspace(input: {name: ""}) { id } }`, "mutation Empty", "BAD_USER_INPUT"},
		{`{ me { id } }`, "query", "ok"},
	} {
		s.rec.Reset()
		s.post(t, u.Token, c.query, nil)
		var op sdktrace.ReadOnlySpan
		for _, sp := range s.rec.Ended() {
			if sp.Name() == c.span {
				op = sp
			}
		}
		if op == nil {
			t.Errorf("%s: no span %q", c.query, c.span)
			continue
		}
		if op.Parent().IsRemote() || !op.Parent().IsValid() {
			t.Errorf("%s: operation span's parent %v", c.query, op.Parent())
		}
		a := attrs(op)
		if a["taskflow.graphql.outcome"].AsString() != c.outcome || op.Status().Code != codes.Unset {
			t.Errorf("%s: outcome %q status %v, want %q", c.query, a["taskflow.graphql.outcome"].AsString(), op.Status(), c.outcome)
		}
		if et, ok := a["error.type"]; ok != (c.outcome != "ok") || ok && et.AsString() != c.outcome {
			t.Errorf("%s: error.type %v", c.query, et)
		}
	}
}

// The fields of a subscription's events are below its root field, as a
// query's are: they get no span of their own (they each got one, named
// TaskChange.task and so on, as if they were root fields).
func TestTracingSubscriptionEventFieldsGetNoSpans(t *testing.T) {
	t.Parallel()
	s := newTracingSetup(t)
	e := liveEnvOn(t, s.env)
	sse := e.OpenSSE(t, e.member.Token, `subscription($p: ID!) { taskChanges(projectId: $p) { taskId task { id title } actor { id } } }`,
		map[string]any{"p": e.project}, "traceparent", traceparent)
	e.waitSubscribed(t, 1)
	id := e.createTask(t, "traced")
	// An event's fields are resolved, and their spans would have ended,
	// before it is written.
	if ev, ok := sse.Next(); !ok || ev.Event != "next" || !strings.Contains(ev.Data, `"taskId":"`+id+`"`) ||
		!strings.Contains(ev.Data, `"title":"traced"`) {
		t.Fatalf("event: %+v", ev)
	}
	for name := range s.spans(incomingTrace) {
		if strings.HasPrefix(name, "TaskChange.") || strings.HasPrefix(name, "Task.") || strings.HasPrefix(name, "User.") {
			t.Errorf("a field of an event has a span: %s", name)
		}
	}
}

// Health probes and metrics scrapes make no spans.
func TestTracingLeavesProbesOut(t *testing.T) {
	t.Parallel()
	s := newTracingSetup(t)
	for _, path := range []string{"/healthz", "/metrics"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("traceparent", traceparent)
		if rec := serve(s.env.Handler, req); rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", path, rec.Code)
		}
	}
	if n := len(s.rec.Ended()); n != 0 {
		t.Fatalf("%d spans", n)
	}
}

// With tracing off, an incoming traceparent is not taken up: no trace id in
// the log lines or the audit event.
func TestTracingOffIgnoresTraceparent(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Log = slog.New(httpapi.LogHandler(slog.NewJSONHandler(logs, nil)))
	})
	u := env.NewUser(t, "Untraced")
	res := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "Untraced"}) { id } }`, nil,
		"traceparent", traceparent, "X-Request-ID", "untraced-1")
	if res.Code() != "" {
		t.Fatal(string(res.Raw))
	}
	var traceID *string
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT trace_id FROM audit_events WHERE request_id = 'untraced-1'`).Scan(&traceID); err != nil {
		t.Fatal(err)
	}
	if traceID != nil {
		t.Errorf("audit event trace_id = %q", *traceID)
	}
	if strings.Contains(logs.String(), "trace_id") {
		t.Errorf("log carries a trace id: %s", logs.String())
	}
}

// LogHandler adds the trace and span ids of the context, once.
func TestLogHandlerAddsTraceID(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	log := slog.New(httpapi.LogHandler(slog.NewJSONHandler(&logs, nil)))
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(reqinfo.With(context.Background(), reqinfo.Info{RequestID: "rid-1"}), "work")
	defer span.End()
	log.InfoContext(ctx, "in a span")
	log.InfoContext(ctx, "explicit", "trace_id", "mine")
	log.InfoContext(context.Background(), "outside")
	lines := logs.lines(t)
	if lines[0]["trace_id"] != span.SpanContext().TraceID().String() || lines[0]["span_id"] != span.SpanContext().SpanID().String() ||
		lines[0]["request_id"] != "rid-1" {
		t.Errorf("in a span: %v", lines[0])
	}
	if lines[1]["trace_id"] != "mine" || strings.Count(logs.String(), `"trace_id"`) != 2 {
		t.Errorf("explicit: %v", lines[1])
	}
	if _, ok := lines[2]["trace_id"]; ok {
		t.Errorf("outside: %v", lines[2])
	}
}

// String returns everything logged so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
