package loadgen

import (
	"fmt"
	"log/slog"
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

// handlerOptions are the options of an in-process server: the production
// settings, with the rate limiter and idempotency on or off (guards). It
// returns a function that releases what the options hold.
func handlerOptions(cfg Config, db *store.DB, log *slog.Logger, guards bool) (httpapi.Options, func(), error) {
	o := httpapi.Options{DB: db, Log: log, PasswordParams: auth.DefaultPasswordParams}
	if !guards {
		o.RateLimitOff, o.NoIdempotency = true, true
		return o, func() {}, nil
	}
	l, err := ratelimit.New(ratelimit.Options{
		Config:    ratelimit.Config{Points: unlimitedPoints, RedisURL: cfg.RedisURL},
		KeyPrefix: fmt.Sprintf("taskflow-bench-%d:", time.Now().UnixNano()),
		Log:       log,
	})
	if err != nil {
		return o, nil, err
	}
	o.Limiter = l
	return o, l.Close, nil
}
