package live

import (
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/promreg"
)

// metrics are the hub's Prometheus collectors.
type metrics struct {
	open      prometheus.Gauge
	delivered prometheus.Counter
	ended     *prometheus.CounterVec
	lag       prometheus.Histogram
	resyncs   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskflow_subscriptions_open",
			Help: "Subscriptions open on this instance.",
		}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_subscription_events_total",
			Help: "Events delivered to subscriptions.",
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_subscriptions_ended_total",
			Help: "Subscriptions ended or refused, by error code (closed: the client closed it).",
		}, []string{"code"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskflow_subscription_lag_seconds",
			Help:    "Time from an event's occurrence (just before its commit) to its hand-over to the transport.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_subscription_resyncs_total",
			Help: "Events dropped from a full subscription queue; the subscription then read the log itself to catch up.",
		}),
	}
	if reg != nil {
		m.open = promreg.Register(reg, m.open)
		m.delivered = promreg.Register(reg, m.delivered)
		m.ended = promreg.Register(reg, m.ended)
		m.lag = promreg.Register(reg, m.lag)
		m.resyncs = promreg.Register(reg, m.resyncs)
	}
	return m
}
