package bench

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// taskByID makes a task (with an assignee) through env and returns a function
// that serves the load harness's `task` scenario for it through h, in process.
func taskByID(b *testing.B, env *apitest.Env) func(h http.Handler) {
	b.Helper()
	token, projectID := project(b, env)
	var me struct{ Me struct{ ID string } }
	if err := json.Unmarshal(env.Post(b, token, `{ me { id } }`, nil).Body.Data, &me); err != nil {
		b.Fatal(err)
	}
	r := env.Post(b, token, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"projectId": projectID, "title": "Benchmark", "assigneeId": me.Me.ID}})
	var t struct{ CreateTask struct{ ID string } }
	if err := json.Unmarshal(r.Body.Data, &t); err != nil || t.CreateTask.ID == "" {
		b.Fatalf("createTask: %s", r.Raw)
	}
	body, _ := json.Marshal(map[string]any{
		"query":     `query TaskByID($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`,
		"variables": map[string]any{"id": t.CreateTask.ID},
	})
	return func(h http.Handler) {
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `"errors"`) {
			b.Fatalf("task(id): %d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkTaskByID serves task(id) through the whole handler in process
// (transport, auth, parse, validation, cost check, execution, loaders, one
// request at a time) with the defaults of apitest: tracing off. It uses only
// what the commits before tracing have too, so it measures tracing-off against
// no tracing at all (docs/decisions/2026-12-01-tracing.md).
//
// Besides the wall time it reports cpu-ns/op, the process's CPU time (user and
// system, every goroutine: handler, pgx, GC) per request, which a machine
// shared with other work disturbs much less than the wall time.
func BenchmarkTaskByID(b *testing.B) {
	env := apitest.New(b)
	serve := taskByID(b, env)
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		serve(env.Handler)
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
