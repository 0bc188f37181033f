package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/egress"
	"taskflow/httpapi/apitest"
	"taskflow/store"
	"taskflow/webhook"
)

// BenchmarkCreateTaskWebhook compares createTask throughput with no webhook
// endpoint enabled and with one endpoint subscribed to task.* in each
// client's workspace, in alternating rounds (as BenchmarkCreateTaskKeyOverhead),
// twice: with the dispatcher alone running (deliveries enqueued, not worked:
// dispatch-cost-%), then with the whole webhook service of the process
// (dispatcher and River workers delivering to a loopback receiver that
// answers 204: delivering-cost-%). The mutation path itself writes nothing
// more when subscribed; the differences are what dispatching, and delivering
// on the same machine, take from it. 16 clients, each in a
// workspace of its own, keyed calls. Run it with -benchtime=1x; BENCH_ROUNDS
// and BENCH_ROUND tune it.
func BenchmarkCreateTaskWebhook(b *testing.B) {
	rounds, round := alternatingRounds(8, 1500*time.Millisecond)
	for range b.N {
		env := apitest.New(b)
		env.DB.Egress = egress.Policy{AllowHTTP: true, AllowPrivate: true}
		var received atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			received.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(srv.Close)
		const clients = 16
		tokens, projects := make([]string, clients), make([]string, clients)
		for i := range clients {
			tokens[i], projects[i] = project(b, env)
			var ws string
			if err := env.DB.Pool.QueryRow(b.Context(), `SELECT workspace_id FROM projects WHERE id = $1`, projects[i]).Scan(&ws); err != nil {
				b.Fatal(err)
			}
			r := env.Post(b, tokens[i], `mutation($ws: ID!, $u: String!) { createWebhookEndpoint(input: {workspaceId: $ws, url: $u, actions: ["task.*"]}) { secret } }`,
				map[string]any{"ws": ws, "u": srv.URL})
			if r.Code() != "" {
				b.Fatalf("endpoint: %s", r.Raw)
			}
		}
		subscribe := func(on bool) {
			if _, err := env.DB.Pool.Exec(b.Context(), `UPDATE webhook_endpoints SET enabled = $1`, on); err != nil {
				b.Fatal(err)
			}
		}
		q := `mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title } }`
		var seq atomic.Int64
		run := func(on bool) (tasksPerSec, deliveriesPerSec float64) {
			subscribe(on)
			var done atomic.Int64
			before := received.Load()
			stop := time.Now().Add(round)
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					for time.Now().Before(stop) {
						i := seq.Add(1)
						vars := map[string]any{"in": map[string]any{"projectId": projects[c], "title": fmt.Sprintf("task %d", i)},
							"key": fmt.Sprintf("bench-%d", i)}
						if r := env.Post(b, tokens[c], q, vars); r.Code() != "" || r.Status != 200 {
							b.Errorf("createTask: %s", r.Raw)
							return
						}
						done.Add(1)
					}
				})
			}
			start := time.Now()
			wg.Wait()
			secs := time.Since(start).Seconds()
			return float64(done.Load()) / secs, float64(received.Load()-before) / secs
		}
		// alternate runs rounds of both modes and returns the medians of
		// tasks/s without and with the endpoints, and of deliveries/s.
		alternate := func() (off, on, delivered float64) {
			run(false) // warm up
			var offs, ons, ds []float64
			for r := range rounds {
				if r%2 == 0 {
					a, _ := run(false)
					c, d := run(true)
					offs, ons, ds = append(offs, a), append(ons, c), append(ds, d)
				} else {
					c, d := run(true)
					a, _ := run(false)
					offs, ons, ds = append(offs, a), append(ons, c), append(ds, d)
				}
			}
			b.Logf("rounds without %.0f, with %.0f", offs, ons)
			return median(offs), median(ons), median(ds)
		}
		// Phase 1: the dispatcher alone (deliveries enqueued, not worked):
		// what the mutation path pays for being subscribed.
		ctx, stopDispatch := context.WithCancel(b.Context())
		dispatched := make(chan struct{})
		go func() {
			defer close(dispatched)
			(&store.WebhookDispatcher{DB: env.DB}).Run(ctx)
		}()
		do, dn, _ := alternate()
		stopDispatch()
		<-dispatched
		// Phase 2: the whole service, delivering on the same machine.
		svc, err := webhook.Start(b.Context(), webhook.Options{DB: env.DB, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		mo, mn, md := alternate()
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = svc.Stop(stopCtx)
		cancel()
		b.ReportMetric(100*(do-dn)/do, "dispatch-cost-%")
		b.ReportMetric(mo, "no-endpoint-tasks/s")
		b.ReportMetric(mn, "endpoint-tasks/s")
		b.ReportMetric(100*(mo-mn)/mo, "delivering-cost-%")
		b.ReportMetric(md, "deliveries/s")
		var pending int
		_ = env.DB.Pool.QueryRow(b.Context(), `SELECT count(*) FROM webhook_deliveries WHERE status = $1`, store.WebhookPending).Scan(&pending)
		b.Logf("dispatcher only: %.0f → %.0f tasks/s; dispatching and delivering: %.0f → %.0f tasks/s, %.0f deliveries/s, %d pending at the end",
			do, dn, mo, mn, md, pending)
	}
}
