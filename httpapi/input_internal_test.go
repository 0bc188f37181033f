package httpapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"

	"taskflow/schema"
)

// BenchmarkInputGuard measures the walk of inputGuard over the strings of a
// document and its variables, once per request: a typical keyed createTask
// with its input in variables, and a document of 200 aliased searches with a
// 100-character string literal each.
func BenchmarkInputGuard(b *testing.B) {
	s, err := schema.Load()
	if err != nil {
		b.Fatal(err)
	}
	var many strings.Builder
	many.WriteString("{")
	for i := range 200 {
		fmt.Fprintf(&many, ` s%d: searchTasks(workspaceId: "w", query: %q) { nodes { id } }`, i, strings.Repeat("q", 100))
	}
	many.WriteString(" }")
	for _, c := range []struct {
		name, query string
		vars        map[string]any
	}{
		{"createTask", `mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title } }`,
			map[string]any{"in": map[string]any{"projectId": "6f1c1f3e-6a4c-4d0e-9a6e-0c2f5b8f9d11", "title": "Write the report",
				"description": strings.Repeat("d", 2000), "priority": "HIGH"}, "key": "5b1c0e0e-3f7a-4c1e-9a53-0d6c2f1d8e2a"}},
		{"200 literals", many.String(), nil},
	} {
		doc, gerr := gqlparser.LoadQuery(s, c.query)
		if gerr != nil {
			b.Fatal(gerr)
		}
		oc := &graphql.OperationContext{Doc: doc, Operation: doc.Operations[0], Variables: c.vars}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := (inputGuard{}).MutateOperationContext(b.Context(), oc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
