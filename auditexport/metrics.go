package auditexport

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/promreg"
	"taskflow/store"
)

// Outcomes of taskflow_audit_exports_finished_total.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeExpired   = "expired"
	outcomeTakenOver = "taken_over"
)

// metrics are the audit exports' Prometheus collectors.
type metrics struct {
	finishes *prometheus.CounterVec
	duration *prometheus.HistogramVec
	bytes    prometheus.Counter
}

// newMetrics registers the collectors in reg (nil: they count,
// unregistered), with the gauge of exports queued and running read from db
// at each scrape.
func newMetrics(reg prometheus.Registerer, db *store.DB) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		finishes: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_audit_exports_finished_total",
			Help: "Audit exports that ended, by outcome: succeeded, failed (their last run's failure, one that will not pass, their run silent once more after store.AuditExportMaxTakeovers (4) takeovers, or still QUEUED or RUNNING 12 hours after they started), expired (their file deleted past its expiry), taken_over (their run stopped stamping its heartbeat: a new run writes them).",
		}, []string{"outcome"})),
		duration: promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskflow_audit_export_duration_seconds",
			Help:    "Time the run that ended an audit export took, from its begin to its end, by outcome: succeeded or failed.",
			Buckets: []float64{.1, .5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"outcome"})),
		bytes: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_audit_export_bytes_total",
			Help: "Bytes of the files of audit exports that succeeded, written to the blob store.",
		})),
	}
	for _, o := range []string{outcomeSucceeded, outcomeFailed, outcomeExpired, outcomeTakenOver} {
		m.finishes.WithLabelValues(o)
	}
	promreg.Register(reg, &activeCollector{db: db})
	return m
}

// finished counts an export a run ended.
func (m *metrics) finished(outcome string, took time.Duration, bytes int64) {
	m.finishes.WithLabelValues(outcome).Inc()
	m.duration.WithLabelValues(outcome).Observe(took.Seconds())
	m.bytes.Add(float64(bytes))
}

// activeCollector reports, at each scrape, the exports queued and running
// (one query, bounded by a second).
type activeCollector struct{ db *store.DB }

var activeDesc = prometheus.NewDesc("taskflow_audit_exports",
	"Audit exports not ended, of every workspace, by state: QUEUED (waiting for a worker, or taken over) or RUNNING.",
	[]string{"state"}, nil)

// Describe sends the description.
func (c *activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc }

// Collect reads the counts; a failed read reports nothing.
func (c *activeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	queued, running, err := c.db.AuditExportCounts(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(queued), string(store.AuditExportQueued))
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(running), string(store.AuditExportRunning))
}
