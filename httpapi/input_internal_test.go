package httpapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

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
	types := newInputTypes(s)
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
				if err := (inputGuard{types: types}).MutateOperationContext(b.Context(), oc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Every enum and custom scalar that a variable or literal can carry has its
// check in unmarshalers (the function gqlgen's generated code unmarshals it
// with): one without would be refused only as its field ran, after the
// operation was charged.
func TestInputCheckedTypesCoverTheSchema(t *testing.T) {
	s, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	input := map[string]bool{}
	var reach func(name string)
	reach = func(name string) {
		if input[name] {
			return
		}
		input[name] = true
		if def := s.Types[name]; def != nil && def.Kind == ast.InputObject {
			for _, f := range def.Fields {
				reach(f.Type.Name())
			}
		}
	}
	for _, def := range s.Types {
		for _, f := range def.Fields {
			for _, a := range f.Arguments {
				reach(a.Type.Name())
			}
		}
	}
	for _, d := range s.Directives {
		for _, a := range d.Arguments {
			reach(a.Type.Name())
		}
	}
	types := newInputTypes(s)
	for name := range input {
		def := s.Types[name]
		if def == nil || def.BuiltIn {
			continue
		}
		custom := def.Kind == ast.Enum || def.Kind == ast.Scalar
		if custom && unmarshalers[name] == nil {
			t.Errorf("%s (%s) is taken as input and has no check in unmarshalers", name, def.Kind)
		}
		if custom && !types.checked[name] {
			t.Errorf("%s is not among the checked types", name)
		}
	}
	for _, name := range []string{"CreateTaskInput", "UpdateTaskInput", "AuditEventFilter"} {
		if !types.checked[name] {
			t.Errorf("input %s holds a checked type and is not checked", name)
		}
	}
	if types.checked["CreateWorkspaceInput"] || types.checked["ID"] || types.checked["String"] {
		t.Errorf("types with nothing to check are walked: %v", types.checked)
	}
}
