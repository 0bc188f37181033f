package idempotency

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a keyed mutation, the values of the outcome label.
const (
	outcomeFirstRun   = "first_run"
	outcomeReplay     = "replay"
	outcomeMismatch   = "mismatch"
	outcomeInProgress = "in_progress"
)

// metrics are the idempotency counters.
type metrics struct {
	requests *prometheus.CounterVec
	purged   prometheus.Counter
}

// newMetrics makes the counters and registers them on reg (nil: not registered).
// Counters already registered on reg by another handler or purger are shared.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_idempotency_requests_total",
			Help: "Keyed mutation calls by field and outcome (first_run, replay, mismatch, in_progress).",
		}, []string{"field", "outcome"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_idempotency_purged_total",
			Help: "Expired idempotency keys deleted by the purger.",
		}),
	}
	if reg != nil {
		m.requests = register(reg, m.requests)
		m.purged = register(reg, m.purged)
	}
	return m
}

// register registers c on reg, or returns the equal collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
