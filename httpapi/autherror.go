package httpapi

import (
	"log/slog"
	"net/http"

	"taskflow/errs"
	"taskflow/reqinfo"
)

// authFailure answers a request whose bearer token could not be accepted. A bad,
// expired or revoked token is 401 UNAUTHENTICATED (writeAuthError); any other
// failure (Postgres unreachable while looking the token up) is logged and
// answered 503 INTERNAL with Retry-After, so that a client does not take an
// outage for a sign-out.
func authFailure(log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if errs.CodeOf(err) == errs.CodeUnauthenticated {
			writeAuthError(w, r, err)
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
