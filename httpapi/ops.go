package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/ratelimit"
	"taskflow/reqinfo"
)

// healthTimeout bounds each dependency check of /healthz.
const healthTimeout = 2 * time.Second

// Dependency is a service that /healthz reports on besides Postgres. Its outage
// degrades the instance (the body says so) but does not take it out of service:
// /healthz stays 200 as long as Postgres answers.
type Dependency struct {
	// Name is the dependency's key in the /healthz body, e.g. "redis".
	Name string
	// Mode optionally says how the dependency is used, e.g. "shared" or
	// "in-process (single instance only)"; it is reported as is.
	Mode string
	// Ping reports whether the dependency answers. Nil means there is nothing to
	// reach (an in-process stand-in), which is always healthy.
	Ping func(ctx context.Context) error
}

// ops are the operational parts of the handler: metrics, access log, panic
// recovery and the /, /healthz and /metrics routes.
type ops struct {
	o       Options
	reg     *prometheus.Registry
	metrics *metrics
}

// newOps prepares the operational parts for o, with a registry of their own
// when o.Registry is nil, and the access log on o.Log when o.AccessLog is nil.
func newOps(o Options) *ops {
	if o.AccessLog == nil {
		o.AccessLog = o.Log
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return &ops{o: o, reg: reg, metrics: newMetrics(reg)}
}

// routes adds the playground, health and metrics routes to mux.
func (p *ops) routes(mux *http.ServeMux) {
	playgroundRoutes(mux)
	mux.HandleFunc("GET /healthz", p.healthz)
	mux.Handle("GET /metrics", requireBearer(p.o.MetricsToken, metricsHandler(p.reg)))
}

// requireBearer answers 401 to a request without "Authorization: Bearer
// token"; an empty token lets every request through.
func requireBearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, _ := auth.Bearer(r); subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wrap puts the access log, HTTP metrics and panic recovery around next.
func (p *ops) wrap(next http.Handler) http.Handler {
	return p.accessLog(recoverHTTP(p.o.Log, next))
}

// health is the /healthz state of one dependency.
type health struct {
	OK    bool   `json:"ok"`
	Mode  string `json:"mode,omitempty"`
	Error string `json:"error,omitempty"`
}

// limiterHealth is the "redis" entry of /healthz: how rate limiting works right
// now. Mode is "redis" (shared budgets), "memory" (no REDIS_URL: in process,
// single instance only) or "memory-fallback" (Redis configured but not
// answering: failing open to in-process budgets, not ok). The error is a short
// fixed message; the details are in the log.
func limiterHealth(ctx context.Context, l *ratelimit.Limiter) health {
	st := l.Check(ctx)
	h := health{OK: st.Healthy, Mode: st.Backend}
	if !st.Healthy {
		h.Error = "Redis does not answer; rate limits are kept per instance until it does"
	}
	return h
}

// healthz answers 200 when Postgres answers and 503 when it does not, with the
// state of Postgres and of every other dependency in the body. Status is "ok",
// "degraded" (Postgres answers, another dependency does not) or "unavailable".
func (p *ops) healthz(w http.ResponseWriter, r *http.Request) {
	checks := append([]Dependency{{Name: "postgres", Ping: p.o.DB.Ping}}, p.o.Dependencies...)
	results := make([]health, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		results[i] = health{OK: true, Mode: c.Mode}
		if c.Ping == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
			defer cancel()
			if err := c.Ping(ctx); err != nil {
				results[i].OK = false
				p.o.Log.WarnContext(r.Context(), "health check failed", "dependency", c.Name, "err", err,
					"request_id", reqinfo.From(r.Context()).RequestID)
			}
		}()
	}
	// The rate limiter's own view of Redis, unless a dependency is named so.
	if l := p.o.Limiter; l != nil && !slices.ContainsFunc(checks, func(d Dependency) bool { return d.Name == "redis" }) {
		h := limiterHealth(r.Context(), l)
		if !h.OK {
			p.o.Log.WarnContext(r.Context(), "health check failed", "dependency", "redis", "err", l.Status().Error,
				"request_id", reqinfo.From(r.Context()).RequestID)
		}
		wg.Wait()
		checks = append(checks, Dependency{Name: "redis"})
		results = append(results, h)
	}
	wg.Wait()

	body := map[string]any{}
	status, code := "ok", http.StatusOK
	for i, c := range checks {
		body[c.Name] = results[i]
		if !results[i].OK && status == "ok" {
			status = "degraded"
		}
	}
	if !results[0].OK {
		status, code = "unavailable", http.StatusServiceUnavailable
	}
	body["status"] = status
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// noteKey is the context key of a request's *requestNote.
type noteKey struct{}

// requestNote carries what the GraphQL layer learns about a request (operation
// name, outcome, the deprecated fields it uses) out to the access log.
type requestNote struct {
	mu         sync.Mutex
	operation  string
	outcome    string
	deprecated string
}

// noteFrom returns the request's note, or nil (whose set does nothing).
func noteFrom(ctx context.Context) *requestNote {
	n, _ := ctx.Value(noteKey{}).(*requestNote)
	return n
}

// set records the operation name and outcome.
func (n *requestNote) set(operation, outcome string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.operation, n.outcome = operation, outcome
	n.mu.Unlock()
}

// setDeprecated records the deprecated fields and arguments the operation
// uses, joined by commas.
func (n *requestNote) setDeprecated(fields string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.deprecated = fields
	n.mu.Unlock()
}

// deprecatedFields returns what setDeprecated recorded.
func (n *requestNote) deprecatedFields() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deprecated
}

// get returns what set recorded.
func (n *requestNote) get() (operation, outcome string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.operation, n.outcome
}

// accessLog logs one line per request (method, path, route, status, bytes,
// duration, client IP, request id, and the GraphQL operation and outcome when
// there is one) and counts and times it in the HTTP metrics. Successful health
// and metrics scrapes log at debug level so that probes do not flood the log.
func (p *ops) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		note := &requestNote{}
		r = r.WithContext(context.WithValue(r.Context(), noteKey{}, note))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			status := sw.status
			if status == 0 {
				// Nothing written: a handler that returned without writing (200), or
				// a panic on its way up (the connection is aborted).
				status = http.StatusOK
				if pv := recover(); pv != nil {
					defer panic(pv)
					status = http.StatusInternalServerError
				}
			}
			elapsed := time.Since(start)
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			method := methodLabel(r.Method)
			nameServerSpan(r, method)
			p.metrics.httpRequests.WithLabelValues(route, method, fmt.Sprint(status)).Inc()
			p.metrics.httpDuration.WithLabelValues(route, method).Observe(elapsed.Seconds())

			info := reqinfo.From(r.Context())
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.String("route", route),
				slog.Int("status", status),
				slog.Int64("bytes", sw.bytes),
				slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
				slog.String("ip", info.IP),
				slog.String("request_id", info.RequestID),
			}
			if op, outcome := note.get(); op != "" {
				attrs = append(attrs, slog.String("operation", op), slog.String("outcome", outcome))
			}
			if fields := note.deprecatedFields(); fields != "" {
				attrs = append(attrs, slog.String("deprecated", fields))
			}
			level := slog.LevelInfo
			switch {
			case status == http.StatusServiceUnavailable:
				// A dependency failing for the moment (UNAVAILABLE, a
				// stream interrupted, /healthz): no bug. A 503 a bug
				// answers has its own line at ERROR.
				level = slog.LevelWarn
			case status >= 500:
				level = slog.LevelError
			case status < 300 && (route == "GET /healthz" || route == "GET /metrics"):
				level = slog.LevelDebug
			}
			p.o.AccessLog.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
}

// nameServerSpan names the request's HTTP server span after the route the mux
// matched ("POST /query"), as the semantic conventions say, and sets
// http.route: the server span is made outside the mux, which sets the pattern
// on the request it routes, so the span cannot see it itself. Without a
// recording span it does nothing.
func nameServerSpan(r *http.Request, method string) {
	span := trace.SpanFromContext(r.Context())
	if r.Pattern == "" || !span.IsRecording() {
		return
	}
	route := r.Pattern
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path // "GET /healthz": the method is not part of the route
	}
	span.SetName(method + " " + route)
	span.SetAttributes(semconv.HTTPRoute(route))
}

// statusWriter remembers the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// WriteHeader records the status.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and counts the bytes.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush passes flushes on (streamed responses).
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// written reports whether the response has started.
func (w *statusWriter) written() bool { return w.status != 0 }

// recoverHTTP turns a panic in a handler into a logged INTERNAL error (HTTP 500)
// when the response has not started, and aborts the connection when it has, so
// that a client never takes a truncated answer for a complete one. GraphQL
// resolver panics are recovered by gqlgen before they get here.
func recoverHTTP(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			log.ErrorContext(r.Context(), "panic serving request", "panic", fmt.Sprint(p),
				"request_id", reqinfo.From(r.Context()).RequestID, "path", r.URL.Path,
				"stack", string(debug.Stack()))
			if sw, ok := w.(interface{ written() bool }); ok && sw.written() {
				panic(http.ErrAbortHandler)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"errors":[{"message":"internal error","extensions":{"code":%q}}]}`, errs.CodeInternal)
		}()
		next.ServeHTTP(w, r)
	})
}
