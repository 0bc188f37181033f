package idempotency

import (
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/promreg"
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
		m.requests = promreg.Register(reg, m.requests)
		m.purged = promreg.Register(reg, m.purged)
	}
	return m
}
