package loadgen

import (
	"log/slog"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/store"
)

// handlerOptions are the options of an in-process server: the production
// settings, with the rate limiter and idempotency on or off (guards). It
// returns a function that releases what the options hold.
func handlerOptions(cfg Config, db *store.DB, log *slog.Logger, guards bool) (httpapi.Options, func(), error) {
	o := httpapi.Options{DB: db, Log: log, PasswordParams: auth.DefaultPasswordParams, NoIdempotency: !guards}
	return o, func() {}, nil
}
