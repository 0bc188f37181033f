package ratelimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/promreg"
)

// metrics are the limiter's Prometheus collectors.
type metrics struct {
	operations    *prometheus.CounterVec
	cost          prometheus.Histogram
	redisFailures prometheus.Counter
	redisUp       prometheus.Gauge
	leased        prometheus.Counter
	costAllowed   prometheus.Counter // operations{limit="cost",outcome="allowed"}, resolved once
	turnsWaiting  prometheus.Gauge
	turnsActive   prometheus.Gauge
	turnsRefused  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_ratelimit_operations_total",
			Help: "GraphQL operations checked against each limit, by outcome (allowed, limited, too_costly); limited and too_costly also count the charges the cost budget refused while an operation ran (subscription events, lists longer than priced) and beside /query (downloads, audit exports).",
		}, []string{"limit", "outcome"}),
		cost: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskflow_query_cost",
			Help:    "Calculated cost of GraphQL operations.",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000},
		}),
		redisFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_ratelimit_redis_failures_total",
			Help: "Rate-limit checks that could not reach Redis and fell back to the in-process limiter.",
		}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskflow_ratelimit_redis_up",
			Help: "1 while rate limiting uses Redis, 0 while it has failed open to the in-process limiter.",
		}),
		leased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_ratelimit_leased_total",
			Help: "Cost-budget checks answered from this instance's lease, without a Redis round trip.",
		}),
		turnsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskflow_ratelimit_turns_waiting",
			Help: "Requests waiting for their caller's turn through parse and validation (one at a time per caller).",
		}),
		turnsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskflow_ratelimit_turns_active",
			Help: "Requests in their caller's turn: being read, parsed, validated and priced.",
		}),
		turnsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_ratelimit_turns_refused_total",
			Help: "Requests answered 429 because too many requests of their caller were waiting for its turn.",
		}),
	}
	if reg != nil {
		// A second limiter on the same registry (tests, two handlers in one
		// process) shares the collectors already registered.
		m.operations = promreg.Register(reg, m.operations)
		m.cost = promreg.Register(reg, m.cost)
		m.redisFailures = promreg.Register(reg, m.redisFailures)
		m.redisUp = promreg.Register(reg, m.redisUp)
		m.leased = promreg.Register(reg, m.leased)
		m.turnsWaiting = promreg.Register(reg, m.turnsWaiting)
		m.turnsActive = promreg.Register(reg, m.turnsActive)
		m.turnsRefused = promreg.Register(reg, m.turnsRefused)
	}
	m.redisUp.Set(1)
	m.costAllowed = m.operations.WithLabelValues(LimitCost, "allowed")
	return m
}
