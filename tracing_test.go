package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"taskflow/ratelimit/ratelimittest"
	"taskflow/store/storetest"
)

// otlpReceiver is the receiving end of the OpenTelemetry collector's wire
// protocol, OTLP: over HTTP (protobuf bodies at /v1/traces) and over gRPC
// (the TraceService), both decoding with the protocol's own generated types.
// It keeps every span it is sent.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

// receivedSpan is a span with the attributes of its resource.
type receivedSpan struct {
	*tracepb.Span
	resource map[string]string
}

// Export is the gRPC TraceService's method.
func (o *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (o *otlpReceiver) keep(req *coltracepb.ExportTraceServiceRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, receivedSpan{s, res})
			}
		}
	}
}

// ServeHTTP is OTLP/HTTP: POST /v1/traces, application/x-protobuf, maybe gzipped.
func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not OTLP/HTTP protobuf traces", http.StatusBadRequest)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.keep(&req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// trace returns the spans received of the trace id (hex).
func (o *otlpReceiver) trace(id string) []receivedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []receivedSpan
	for _, s := range o.spans {
		if hex.EncodeToString(s.GetTraceId()) == id {
			out = append(out, s)
		}
	}
	return out
}

// attr returns a span attribute as text ("" when absent).
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return anyValue(kv.GetValue())
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

// tracedServer is the real binary with tracing on, and its log.
type tracedServer struct {
	cmd   *exec.Cmd
	logs  *logLines
	addr  string
	dbURL string
}

// startTraced starts the binary with the extra settings and waits until it listens.
func startTraced(t *testing.T, extra ...string) *tracedServer {
	t.Helper()
	dbURL := storetest.URL(t)
	cmd := command(t, append([]string{"DATABASE_URL=" + dbURL, "HTTP_ADDR=127.0.0.1:0"}, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	logs := watchLog(t, stderr)
	listening := logs.waitFor(t, "listening")
	if listening["tracing"] != true {
		t.Fatalf("listening without tracing: %v", listening)
	}
	return &tracedServer{cmd: cmd, logs: logs, addr: listening["addr"].(string), dbURL: dbURL}
}

// post sends a GraphQL request with the headers and returns the response and its body.
func (s *tracedServer) post(t *testing.T, query string, vars map[string]any, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return res, out
}

// stop sends SIGTERM and waits for a clean exit: the spans still buffered are
// exported on the way out. It returns the log's JSON records.
func (s *tracedServer) stop(t *testing.T) []map[string]any {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range s.logs.ch { // until the process closes stderr
	}
	if code := exitCode(t, s.cmd.Wait()); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, s.logs.raw.String())
	}
	var out []map[string]any
	for _, l := range strings.Split(s.logs.raw.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// The real server exports its spans over OTLP/HTTP to a receiver speaking the
// collector's protocol: a request with a traceparent continues that trace
// through the HTTP server span, the GraphQL operation and root field spans,
// Postgres statements (text, no argument values) and Redis commands; its log
// lines and its audit event carry the trace id; the spans arrive although the
// server was stopped right after the request (flushed on SIGTERM).
func TestTracesExportedOverOTLP(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	// A Redis of the test's own: the shared one keeps the register budget of
	// 127.0.0.1 (20 an hour) across test runs.
	rs := ratelimittest.StartRedis(t)
	s := startTraced(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL,
		"REDIS_URL=redis://"+rs.Addr()+"/0", "RATE_LIMIT_LEASE=0") // a Redis round trip per operation

	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	const email = "traced@example.com" // the database is the test's own
	res, out := s.post(t, `mutation Register($in: RegisterInput!) { register(input: $in) { user { id } } }`,
		map[string]any{"in": map[string]any{"email": email, "password": "correct horse battery", "name": "Traced"}},
		"traceparent", "00-"+traceID+"-"+parentID+"-01", "X-Request-ID", "otlp-1")
	if res.StatusCode != http.StatusOK || out["errors"] != nil {
		t.Fatalf("register: %d %v", res.StatusCode, out)
	}
	// The trace is passed on by outgoing calls, not echoed to the client.
	if res.Header.Get("traceparent") != "" || res.Header.Get("traceresponse") != "" {
		t.Errorf("response headers: %v", res.Header)
	}
	logs := s.stop(t)

	spans := recv.trace(traceID)
	byID := map[string]receivedSpan{}
	byName := map[string]receivedSpan{}
	for _, sp := range spans {
		byID[hex.EncodeToString(sp.GetSpanId())] = sp
		byName[sp.GetName()] = sp
	}
	server, op, field := byName["POST /query"], byName["mutation Register"], byName["Mutation.register"]
	if server.Span == nil || op.Span == nil || field.Span == nil {
		t.Fatalf("spans of the trace: %v", names(spans))
	}
	if hex.EncodeToString(server.GetParentSpanId()) != parentID || server.GetKind() != tracepb.Span_SPAN_KIND_SERVER ||
		server.resource["service.name"] != "taskflow" {
		t.Errorf("server span: parent %x kind %v resource %v", server.GetParentSpanId(), server.GetKind(), server.resource)
	}
	if !bytes.Equal(op.GetParentSpanId(), server.GetSpanId()) || !bytes.Equal(field.GetParentSpanId(), op.GetSpanId()) {
		t.Errorf("op's parent %x (server %x), field's parent %x (op %x)", op.GetParentSpanId(), server.GetSpanId(),
			field.GetParentSpanId(), op.GetSpanId())
	}
	if attr(op.Span, "graphql.operation.type") != "mutation" || attr(op.Span, "graphql.operation.name") != "Register" ||
		attr(op.Span, "taskflow.graphql.outcome") != "ok" || attr(op.Span, "taskflow.graphql.cost") == "" {
		t.Errorf("operation span attributes: %v", op.GetAttributes())
	}
	// Every other span descends from the server span.
	var pg, redis []receivedSpan
	for _, sp := range spans {
		for p := sp; hex.EncodeToString(p.GetSpanId()) != hex.EncodeToString(server.GetSpanId()); {
			parent, ok := byID[hex.EncodeToString(p.GetParentSpanId())]
			if !ok {
				if sp.Span != server.Span {
					t.Errorf("span %q is not under the server span", sp.GetName())
				}
				break
			}
			p = parent
		}
		switch {
		case attr(sp.Span, "db.system.name") == "postgresql" && attr(sp.Span, "db.query.text") != "":
			pg = append(pg, sp)
		case attr(sp.Span, "db.system") == "redis" || attr(sp.Span, "db.system.name") == "redis":
			redis = append(redis, sp)
		}
		// No argument value is recorded anywhere: not the e-mail, not the password.
		for _, kv := range sp.GetAttributes() {
			if v := anyValue(kv.GetValue()); strings.Contains(v, email) || strings.Contains(v, "correct horse") {
				t.Errorf("span %q attribute %s = %q", sp.GetName(), kv.GetKey(), v)
			}
		}
	}
	var inserts bool
	for _, sp := range pg {
		inserts = inserts || strings.Contains(attr(sp.Span, "db.query.text"), "INSERT INTO users")
	}
	if len(pg) == 0 || !inserts || len(redis) == 0 {
		t.Errorf("postgres spans %v, redis spans %v", names(pg), names(redis))
	}

	// The log lines of the request carry the trace id.
	var lines int
	for _, l := range logs {
		if l["request_id"] == "otlp-1" {
			lines++
			if l["trace_id"] != traceID || l["span_id"] == "" {
				t.Errorf("log line without the trace: %v", l)
			}
		}
	}
	if lines == 0 {
		t.Error("no log line of the request")
	}

	// So does its audit event.
	db, err := pgx.Connect(t.Context(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var got *string
	if err := db.QueryRow(t.Context(), `SELECT trace_id FROM audit_events WHERE request_id = 'otlp-1' AND action = 'user.registered'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got == nil || *got != traceID {
		t.Errorf("audit event trace_id = %v", got)
	}
}

// The same over OTLP/gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc), with the
// service named by OTEL_SERVICE_NAME and a request without traceparent, which
// starts a trace of its own.
func TestTracesExportedOverOTLPgRPC(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, recv)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	s := startTraced(t, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_SERVICE_NAME=taskflow-eu")
	res, out := s.post(t, `query Typename { __typename }`, nil, "X-Request-ID", "otlp-grpc-1")
	if res.StatusCode != http.StatusOK || out["errors"] != nil {
		t.Fatalf("%d %v", res.StatusCode, out)
	}
	logs := s.stop(t)
	var traceID string
	for _, l := range logs {
		if l["msg"] == "request" && l["request_id"] == "otlp-grpc-1" {
			traceID, _ = l["trace_id"].(string)
		}
	}
	spans := recv.trace(traceID)
	if traceID == "" || len(spans) != 2 || spans[0].resource["service.name"] != "taskflow-eu" {
		t.Fatalf("trace %q: %v", traceID, names(spans))
	}
	for _, sp := range spans {
		if sp.GetName() == "POST /query" && len(sp.GetParentSpanId()) != 0 {
			t.Errorf("server span has a parent %x", sp.GetParentSpanId())
		}
	}
}

// names lists the spans' names.
func names(spans []receivedSpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.GetName())
	}
	return out
}
