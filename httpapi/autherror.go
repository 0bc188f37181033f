package httpapi

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/errs"
	"taskflow/reqinfo"
)

// authFailure answers a request whose bearer token could not be accepted. A bad,
// expired or revoked token is 401 UNAUTHENTICATED (writeAuthError); any other
// failure is not a sign-out either: Postgres unreachable, or failing for the
// moment, while looking the token up is 503 UNAVAILABLE with Retry-After
// (writeUnavailable); any other is logged and answered 503 INTERNAL with
// Retry-After, so that a client does not take it for a sign-out. A client refused for the invalid tokens its network
// sent (auth.TooManyBadTokens) is 429 RATE_LIMITED with Retry-After.
func authFailure(log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		switch errs.CodeOf(err) {
		case errs.CodeUnauthenticated:
			writeAuthError(w, r, err)
			return
		case errs.CodeRateLimited:
			var e *errs.Error
			errors.As(err, &e)
			retry, _ := e.Extensions["retryAfter"].(int)
			writeTooMany(w, max(retry, 1), gqlerror.List{{Message: e.Message,
				Extensions: map[string]any{"code": string(errs.CodeRateLimited), "retryAfter": max(retry, 1)}}})
			return
		}
		if writeUnavailable(w, r, log, err) {
			return
		}
		log.ErrorContext(r.Context(), "internal error", "err", err, "request_id", reqinfo.From(r.Context()).RequestID)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`))
	}
}
