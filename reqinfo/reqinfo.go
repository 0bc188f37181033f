// Package reqinfo carries what is known about the HTTP request behind a piece
// of work: the client's IP (as TRUSTED_PROXIES resolves it), its user agent, the
// request id and the trace id. The HTTP layer puts it in the context once; the
// audit log records it, the rate limiter keys anonymous budgets by its IP, and
// logs carry its request id. It is a leaf package: it imports only the standard
// library.
package reqinfo

import "context"

// Info is the request context recorded with every audit event and log line.
type Info struct {
	// IP is the client's address: the TCP peer, or the right-most untrusted
	// address of X-Forwarded-For behind a trusted proxy.
	IP string
	// UserAgent is the request's User-Agent header.
	UserAgent string
	// RequestID is the request's X-Request-ID, or one the server made.
	RequestID string
	// TraceID is the W3C trace id of the request's trace (32 lower-case hex
	// digits, the incoming traceparent's or a new one) when tracing is on, else "".
	TraceID string
}

type key struct{}

// With returns ctx carrying info.
func With(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, key{}, info)
}

// From returns the Info of ctx, or the zero Info.
func From(ctx context.Context) Info {
	info, _ := ctx.Value(key{}).(Info)
	return info
}
