package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// CORS is the cross-origin policy of /query for browser frontends.
type CORS struct {
	// AllowedOrigins are the origins ("https://app.example.com") allowed to call
	// /query from a browser; "*" allows any origin. Empty: none.
	AllowedOrigins []string
	// AllowCredentials lets browsers send cookies and HTTP authentication along
	// (Access-Control-Allow-Credentials). Off by default; bearer tokens in the
	// Authorization header do not need it.
	AllowCredentials bool
}

// The CORS answer of /query and /attachments/{id}.
const (
	corsAllowMethods  = "GET, POST, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, Idempotency-Key, X-Request-ID, GraphQL-Preflight, Apollo-Require-Preflight, X-Apollo-Operation-Name, Range, If-Range, If-None-Match, traceparent, tracestate, baggage"
	corsExposeHeaders = "Retry-After, RateLimit, RateLimit-Policy, Idempotent-Replayed, X-Request-ID, Content-Disposition, Content-Range, ETag"
	corsMaxAge        = "600"
)

// corsRequestHeaders are the headers a preflight may ask for: the allowed ones and
// the CORS-safelisted ones a browser may list when their value is unusual.
var corsRequestHeaders = map[string]bool{
	"authorization": true, "content-type": true, "idempotency-key": true, "x-request-id": true,
	"graphql-preflight": true, "apollo-require-preflight": true, "x-apollo-operation-name": true,
	"range": true, "if-range": true, "if-none-match": true,
	"traceparent": true, "tracestate": true, "baggage": true,
	"accept": true, "accept-language": true, "content-language": true,
}

// ParseOrigins parses a comma-separated CORS_ALLOWED_ORIGINS list: each entry is
// "*" or a scheme://host[:port] origin with nothing after it. Origins are
// normalised to lower case.
func ParseOrigins(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if part == "*" {
			out = append(out, part)
			continue
		}
		u, err := url.Parse(part)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("CORS_ALLOWED_ORIGINS: %q is not an origin like https://app.example.com", part)
		}
		out = append(out, strings.ToLower(u.Scheme+"://"+u.Host))
	}
	return out, nil
}

// allows reports whether origin may call /query.
func (c CORS) allows(origin string) bool {
	origin = strings.ToLower(origin)
	for _, o := range c.AllowedOrigins {
		if o == "*" || o == origin {
			return true
		}
	}
	return false
}

// handler applies the policy in front of next: a preflight (OPTIONS with
// Access-Control-Request-Method) from an allowed origin, for an allowed method
// and headers, is answered 204 with the allowed methods and headers; any other
// preflight is refused with 403 and no CORS headers. Other requests from an
// allowed origin get Access-Control-Allow-Origin and the exposed headers; those
// from other origins go through without them (the browser then hides the
// answer). Responses vary by Origin.
func (c CORS) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if preflight {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			if origin == "" || !c.allows(origin) || !preflightAllowed(r) {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			c.allowOrigin(h, origin)
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if origin != "" && c.allows(origin) {
			c.allowOrigin(h, origin)
			h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		}
		next.ServeHTTP(w, r)
	})
}

// allowOrigin sets the headers that let origin read the answer.
func (c CORS) allowOrigin(h http.Header, origin string) {
	h.Set("Access-Control-Allow-Origin", origin)
	if c.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
}

// preflightAllowed reports whether the preflight asks for an allowed method and
// only allowed headers.
func preflightAllowed(r *http.Request) bool {
	switch r.Header.Get("Access-Control-Request-Method") {
	case http.MethodGet, http.MethodPost, http.MethodOptions:
	default:
		return false
	}
	for _, line := range r.Header.Values("Access-Control-Request-Headers") {
		for _, name := range strings.Split(line, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if name != "" && !corsRequestHeaders[name] {
				return false
			}
		}
	}
	return true
}
