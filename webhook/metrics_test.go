package webhook

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"taskflow/store/storetest"
)

// Found in review (2026-12-04): with the dispatcher's cursor deleted (the
// server's role may), taskflow_webhook_dispatch_backlog read 0, as if the
// dispatcher were up to date, while it made no delivery. Now
// taskflow_webhook_dispatch_cursor_missing is 1 and the backlog is absent
// (the dispatcher reaches no event then).
func TestDispatchCursorMetrics(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&queueCollector{db: db})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_webhook_dispatch_backlog Audit events the webhook dispatcher has not reached yet (absent while its cursor is missing).
# TYPE taskflow_webhook_dispatch_backlog gauge
taskflow_webhook_dispatch_backlog 0
# HELP taskflow_webhook_dispatch_cursor_missing 1 when the webhook dispatcher's cursor (row 1 of webhook_dispatch_cursor) is missing: no delivery is made until it is restored; else 0.
# TYPE taskflow_webhook_dispatch_cursor_missing gauge
taskflow_webhook_dispatch_cursor_missing 0
`), "taskflow_webhook_dispatch_backlog", "taskflow_webhook_dispatch_cursor_missing"); err != nil {
		t.Error(err)
	}
	if _, err := db.Pool.Exec(t.Context(), `DELETE FROM webhook_dispatch_cursor`); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskflow_webhook_dispatch_cursor_missing 1 when the webhook dispatcher's cursor (row 1 of webhook_dispatch_cursor) is missing: no delivery is made until it is restored; else 0.
# TYPE taskflow_webhook_dispatch_cursor_missing gauge
taskflow_webhook_dispatch_cursor_missing 1
`), "taskflow_webhook_dispatch_backlog", "taskflow_webhook_dispatch_cursor_missing"); err != nil {
		t.Error(err)
	}
}
