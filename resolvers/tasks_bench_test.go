package resolvers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/store"
)

// BenchmarkProjectTasksPage serves a page of 20 tasks of a project through the
// whole handler in process (transport, auth, parse, validation, execution,
// loaders), one request at a time, and reports the allocations of a request:
//   - nodes asks for the tasks only, no cursor (what a task list shows);
//   - cursors asks for every edge's cursor and the page's endCursor too.
func BenchmarkProjectTasksPage(b *testing.B) {
	env := apitest.New(b)
	w := newWorld(b, env)
	for i := range 20 {
		id := insertTask(b, env, w.project, fmt.Sprintf("Task %d", i), "", store.TaskStatusTodo, w.member)
		if _, err := env.DB.Pool.Exec(b.Context(), `UPDATE tasks SET assignee_id = $2 WHERE id = $1`, id, w.member.ID); err != nil {
			b.Fatal(err)
		}
		for j := range 3 {
			insertComment(b, env, id, fmt.Sprintf("Comment %d", j), w.member)
		}
	}
	for _, q := range []struct{ name, query string }{
		{"nodes", `query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title status priority } } } }`},
		{"cursors", `query($id: ID!) { project(id: $id) { tasks(first: 20) {
			edges { cursor node { id title status priority } } pageInfo { hasNextPage endCursor } } } }`},
		// The nested page of bench/load's taskPage scenario.
		{"nested", `query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title status priority
			assignee { id name } comments(first: 5) { nodes { id body author { id name } } } } pageInfo { hasNextPage } } } }`},
	} {
		b.Run(q.name, func(b *testing.B) {
			body, _ := json.Marshal(map[string]any{"query": q.query, "variables": map[string]any{"id": w.project}})
			serve := func() {
				req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+w.viewer.Token)
				rec := httptest.NewRecorder()
				env.Handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `"errors"`) ||
					strings.Count(rec.Body.String(), `"title"`) != 20 {
					b.Fatalf("project tasks: %d %s", rec.Code, rec.Body)
				}
			}
			serve()
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}
