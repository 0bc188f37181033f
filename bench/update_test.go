package bench

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"taskflow/httpapi/apitest"
)

// BenchmarkUpdateTask measures updateTask throughput over HTTP with 8 parallel
// clients per CPU, each updating a task of its own in one workspace (no row
// is contended), every call with a fresh idempotency key and a new title, so
// that each one changes the task and records an event. Run it against two
// commits alternately to compare them (docs/decisions/2026-12-01-one-round-trip.md,
// addendum on updates).
func BenchmarkUpdateTask(b *testing.B) {
	env := apitest.New(b)
	token, projectID := project(b, env)
	clients := 8 * runtime.GOMAXPROCS(0)
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
	q := `mutation($id: ID!, $in: UpdateTaskInput!, $key: String) { updateTask(id: $id, input: $in, idempotencyKey: $key) {
		id title status } }`
	var next, seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := tasks[int(next.Add(1)-1)%clients]
		for pb.Next() {
			i := seq.Add(1)
			vars := map[string]any{"id": id, "in": map[string]any{"title": fmt.Sprintf("title %d", i)},
				"key": fmt.Sprintf("bench-%d", i)}
			if r := env.Post(b, token, q, vars); r.Code() != "" || r.Status != 200 {
				b.Fatalf("updateTask: %s", r.Raw)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}
