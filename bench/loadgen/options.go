package loadgen

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/ratelimit"
	"taskflow/store"
)

// unlimitedPoints is the cost budget of the harness's servers: the limiter
// checks and charges every request (in Redis when there is one) but never
// refuses one, since the harness measures its cost, not its budget. The
// endpoint limits (searchTasks: 60 a minute per user) stay the contract's; the
// scenarios spread requests over enough users to stay under them.
const unlimitedPoints = 1_000_000_000

// newHandler returns the handler of an in-process server: the production
// settings, with the rate limiter and idempotency on or, without guards, off
// (httpapi.NewUnguardedHandler). It returns a function that releases what the
// handler holds.
func newHandler(cfg Config, db *store.DB, log *slog.Logger, guards bool) (http.Handler, func(), error) {
	o := httpapi.Options{DB: db, Log: log, PasswordParams: auth.DefaultPasswordParams}
	if !guards {
		return httpapi.NewUnguardedHandler(o, httpapi.GuardRateLimit, httpapi.GuardIdempotency), func() {}, nil
	}
	l, err := ratelimit.New(ratelimit.Options{
		Config:    ratelimit.Config{Points: unlimitedPoints, RedisURL: cfg.RedisURL},
		KeyPrefix: fmt.Sprintf("taskflow-bench-%d:", time.Now().UnixNano()),
		Log:       log,
	})
	if err != nil {
		return nil, nil, err
	}
	o.Limiter = l
	return httpapi.NewHandler(o), l.Close, nil
}
