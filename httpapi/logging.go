package httpapi

import (
	"context"
	"log/slog"

	"taskflow/reqinfo"
)

// LogHandler wraps h so that every record logged with a request's context (the
// slog ...Context methods) carries that request's id as "request_id", unless
// the record already has one.
func LogHandler(h slog.Handler) slog.Handler { return requestIDHandler{h} }

// requestIDHandler is LogHandler's handler.
type requestIDHandler struct{ slog.Handler }

// Handle adds the request id of ctx to r.
func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := reqinfo.From(ctx).RequestID; id != "" {
		has := false
		r.Attrs(func(a slog.Attr) bool {
			has = a.Key == "request_id"
			return !has
		})
		if !has {
			r = r.Clone()
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the derived handler.
func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper around the derived handler.
func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
