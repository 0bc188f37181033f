package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"taskflow/promreg"
	"taskflow/querydoc"
)

// maxOperationNames bounds the distinct operation names the metrics keep apart.
// Operation names come from clients; past the bound they are counted as "other",
// so a client cannot grow the label set without limit.
const maxOperationNames = 500

// metrics are the Prometheus collectors of the HTTP API.
type metrics struct {
	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	gqlRequests  *prometheus.CounterVec
	gqlDuration  *prometheus.HistogramVec

	mu    sync.Mutex
	names map[string]struct{}
}

// newMetrics creates the API's collectors and registers them in reg. Collectors
// already registered there (a second handler on the same registry) are reused.
func newMetrics(reg prometheus.Registerer) *metrics {
	buckets := []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	return &metrics{
		httpRequests: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_http_requests_total",
			Help: "HTTP requests served, by route, method and status code.",
		}, []string{"route", "method", "code"})),
		httpDuration: promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskflow_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by route and method.",
			Buckets: buckets,
		}, []string{"route", "method"})),
		gqlRequests: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_graphql_operations_total",
			Help: "GraphQL operations answered, by operation name, type and outcome (ok or the first error's code).",
		}, []string{"operation", "type", "outcome"})),
		gqlDuration: promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskflow_graphql_operation_duration_seconds",
			Help:    "Time from reading a GraphQL request to its response, by operation name, type and outcome.",
			Buckets: buckets,
		}, []string{"operation", "type", "outcome"})),
		names: map[string]struct{}{},
	}
}

// metricsHandler serves the registry in the Prometheus text format.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// operationLabel returns the label for an operation name: the name while fewer
// than maxOperationNames distinct names have been seen, else "other".
func (m *metrics) operationLabel(name string) string {
	if len(name) > 100 {
		return "other"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.names[name]; ok {
		return name
	}
	if len(m.names) >= maxOperationNames {
		return "other"
	}
	m.names[name] = struct{}{}
	return name
}

// methodLabel keeps the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// operationMetrics is the gqlgen extension that counts and times every GraphQL
// response by operation name, type and outcome, notes the operation for the
// access log, and adds extensions.deprecations to the responses of an
// operation that uses deprecated fields (withDeprecations).
type operationMetrics struct{ m *metrics }

var (
	_ graphql.HandlerExtension    = operationMetrics{}
	_ graphql.ResponseInterceptor = operationMetrics{}
)

// ExtensionName names the extension for gqlgen.
func (operationMetrics) ExtensionName() string { return "TaskflowOperationMetrics" }

// Validate accepts every schema.
func (operationMetrics) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptResponse records the response that next produces, including the
// responses of requests that failed to parse or validate, and adds its
// deprecations.
func (e operationMetrics) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	start := graphql.GetStartTime(ctx)
	if start.IsZero() {
		start = time.Now()
	}
	resp := next(ctx)
	if resp == nil {
		return nil
	}
	name, typ := operationOf(ctx)
	outcome := outcomeOf(resp)
	label := e.m.operationLabel(name)
	e.m.gqlRequests.WithLabelValues(label, typ, outcome).Inc()
	e.m.gqlDuration.WithLabelValues(label, typ, outcome).Observe(time.Since(start).Seconds())
	noteFrom(ctx).set(name, outcome)
	withDeprecations(ctx, resp)
	return resp
}

// operationOf returns the operation's name ("anonymous" when it has none,
// "unknown" when the request never got as far as naming a valid operation) and
// its type.
func operationOf(ctx context.Context) (name, typ string) {
	if !graphql.HasOperationContext(ctx) {
		return "unknown", "unknown"
	}
	oc := graphql.GetOperationContext(ctx)
	if oc.Operation != nil {
		name = oc.Operation.Name
		if name == "" {
			name = "anonymous"
		}
		return name, string(oc.Operation.Operation)
	}
	// Parse or validation failed: keep the requested name when it is a GraphQL
	// name, else the name of the document's only operation when it parsed
	// (the document querydoc parsed within its limits: never parsed again).
	if validName(oc.OperationName) {
		return oc.OperationName, "unknown"
	}
	if doc := querydoc.Parsed(oc); oc.OperationName == "" && doc != nil && len(doc.Operations) == 1 {
		if name := doc.Operations[0].Name; name != "" {
			return name, string(doc.Operations[0].Operation)
		}
	}
	return "unknown", "unknown"
}

// outcomeOf returns "ok", or the code of the response's first error.
func outcomeOf(resp *graphql.Response) string {
	if len(resp.Errors) == 0 {
		return "ok"
	}
	if code, ok := resp.Errors[0].Extensions["code"].(string); ok && code != "" {
		return code
	}
	return "error"
}

// validName reports whether s is a GraphQL name (/[_A-Za-z][_0-9A-Za-z]*/).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}
