package webhook

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/promreg"
	"taskflow/store"
)

// metrics are the webhook engine's Prometheus collectors.
type metrics struct {
	attempts *prometheus.CounterVec
	finishes *prometheus.CounterVec
	latency  prometheus.Histogram
}

// newMetrics registers the collectors in reg (nil: they count, unregistered).
func newMetrics(reg prometheus.Registerer, db *store.DB) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		attempts: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_webhook_attempts_total",
			Help: "Webhook delivery attempts, by outcome: success (2xx), status (another HTTP status), timeout, refused (a non-public address), error (no answer).",
		}, []string{"outcome"})),
		finishes: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_webhook_deliveries_total",
			Help: "Webhook deliveries that ended, by status: SUCCEEDED, or FAILED after their last attempt.",
		}, []string{"status"})),
		latency: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskflow_webhook_attempt_duration_seconds",
			Help:    "Time from sending a webhook delivery attempt to the end of its answer (or its failure).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30},
		})),
	}
	promreg.Register(reg, &queueCollector{db: db})
	return m
}

// attempted counts an attempt.
func (m *metrics) attempted(r result) {
	m.attempts.WithLabelValues(r.outcome).Inc()
	m.latency.Observe(r.latency.Seconds())
}

// finished counts a delivery that ended.
func (m *metrics) finished(s store.WebhookDeliveryStatus) {
	m.finishes.WithLabelValues(string(s)).Inc()
}

// queueCollector reports, at each scrape, the deliveries that wait and the
// events the dispatcher has not reached (one query each, bounded by a
// second), and whether the dispatcher's cursor is missing, which stops it
// (store.ErrDispatchCursorMissing).
type queueCollector struct{ db *store.DB }

var (
	queueDepthDesc = prometheus.NewDesc("taskflow_webhook_queue_depth",
		"Webhook deliveries PENDING: queued, in flight or waiting for a retry.", nil, nil)
	oldestDesc = prometheus.NewDesc("taskflow_webhook_oldest_pending_seconds",
		"Age of the oldest PENDING webhook delivery (0 when none).", nil, nil)
	backlogDesc = prometheus.NewDesc("taskflow_webhook_dispatch_backlog",
		"Audit events the webhook dispatcher has not reached yet (absent while its cursor is missing).", nil, nil)
	cursorMissingDesc = prometheus.NewDesc("taskflow_webhook_dispatch_cursor_missing",
		"1 when the webhook dispatcher's cursor (row 1 of webhook_dispatch_cursor) is missing: no delivery is made until it is restored; else 0.", nil, nil)
)

// Describe sends the descriptions.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- oldestDesc
	ch <- backlogDesc
	ch <- cursorMissingDesc
}

// Collect reads the queue; a failed read reports nothing.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s, err := c.db.WebhookQueueStats(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(s.Pending))
		age := 0.0
		if !s.Oldest.IsZero() {
			age = time.Since(s.Oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
	}
	n, err := c.db.WebhookDispatchBacklog(ctx)
	switch {
	case errors.Is(err, store.ErrDispatchCursorMissing):
		ch <- prometheus.MustNewConstMetric(cursorMissingDesc, prometheus.GaugeValue, 1)
	case err == nil:
		ch <- prometheus.MustNewConstMetric(cursorMissingDesc, prometheus.GaugeValue, 0)
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(n))
	}
}
