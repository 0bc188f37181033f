package bench

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"taskflow/httpapi/apitest"
)

// BenchmarkUpdateTask measures updateTask over HTTP, every call with a fresh
// idempotency key and a new title, so that each one changes its task and
// records an event: "serial", one client, whose ns/op is the latency of an
// update; "parallel", 8 clients per CPU, each updating a task of its own in
// one workspace (no row is contended), the throughput. Run it against two
// commits alternately to compare them
// (docs/decisions/2026-12-01-one-round-trip.md, addendum on updates).
func BenchmarkUpdateTask(b *testing.B) {
	for _, clients := range []int{1, 8 * runtime.GOMAXPROCS(0)} {
		b.Run(map[bool]string{true: "serial", false: "parallel"}[clients == 1], func(b *testing.B) {
			env := apitest.New(b)
			token, projectID := project(b, env)
			tasks := make([]string, clients)
			for i := range tasks {
				r := env.Post(b, token, `mutation($p: ID!) { createTask(input: {projectId: $p, title: "t"}) { id } }`,
					map[string]any{"p": projectID})
				var out struct{ CreateTask struct{ ID string } }
				if err := json.Unmarshal(r.Body.Data, &out); err != nil || out.CreateTask.ID == "" {
					b.Fatalf("task: %s", r.Raw)
				}
				tasks[i] = out.CreateTask.ID
			}
			q := `mutation($id: ID!, $in: UpdateTaskInput!, $key: String) {
				updateTask(id: $id, input: $in, idempotencyKey: $key) { id title status } }`
			var seq atomic.Int64
			update := func(id string) {
				i := seq.Add(1)
				vars := map[string]any{"id": id, "in": map[string]any{"title": fmt.Sprintf("title %d", i)},
					"key": fmt.Sprintf("bench-%d", i)}
				if r := env.Post(b, token, q, vars); r.Code() != "" || r.Status != 200 {
					b.Fatalf("updateTask: %s", r.Raw)
				}
			}
			b.ResetTimer()
			if clients == 1 {
				for b.Loop() {
					update(tasks[0])
				}
			} else {
				var next atomic.Int64
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					id := tasks[int(next.Add(1)-1)%clients]
					for pb.Next() {
						update(id)
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}
