package httpapi

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"taskflow/reqinfo"
)

// LogHandler wraps h so that every record logged with a request's context (the
// slog ...Context methods) carries that request's id as "request_id" and, when
// the context is in a trace, the trace's id as "trace_id" and the current span's
// as "span_id", unless the record already has them.
func LogHandler(h slog.Handler) slog.Handler { return contextAttrs{h} }

// contextAttrs is LogHandler's handler.
type contextAttrs struct{ slog.Handler }

// Handle adds the request id and trace of ctx to r.
func (h contextAttrs) Handle(ctx context.Context, r slog.Record) error {
	id := reqinfo.From(ctx).RequestID
	sc := trace.SpanContextFromContext(ctx)
	addID := id != "" && !hasAttr(r, "request_id")
	addTrace := sc.IsValid() && !hasAttr(r, "trace_id")
	if addID || addTrace {
		r = r.Clone()
		if addID {
			r.AddAttrs(slog.String("request_id", id))
		}
		if addTrace {
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// hasAttr reports whether r has a top-level attribute named key.
func hasAttr(r slog.Record, key string) bool {
	has := false
	r.Attrs(func(a slog.Attr) bool {
		has = a.Key == key
		return !has
	})
	return has
}

// WithAttrs keeps the wrapper around the derived handler.
func (h contextAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextAttrs{h.Handler.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper around the derived handler.
func (h contextAttrs) WithGroup(name string) slog.Handler {
	return contextAttrs{h.Handler.WithGroup(name)}
}
