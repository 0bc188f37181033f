package httpapi

import (
	"context"
	"slices"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/graph"
	"taskflow/querydoc"
)

// prepareOperation runs docs on query as gqlgen's executor does before the
// operation context mutators: validated, its only operation selected, vars
// coerced.
func prepareOperation(t testing.TB, docs querydoc.Extension, s *ast.Schema, query string, vars map[string]any) (context.Context, *graphql.OperationContext) {
	t.Helper()
	rc := &graphql.OperationContext{}
	ctx := graphql.WithOperationContext(context.Background(), rc)
	if err := docs.MutateOperationParameters(ctx, &graphql.RawParams{Query: query}); err != nil {
		t.Fatal(err)
	}
	rc.Doc, _ = querydoc.ExecutorCache{}.Get(ctx, query)
	rc.Operation = rc.Doc.Operations[0]
	coerced, err := validator.VariableValues(s, rc.Operation, vars)
	if err != nil {
		t.Fatal(err)
	}
	rc.Variables = coerced
	return ctx, rc
}

// The deprecations extension costs an operation that uses nothing
// deprecated (task(id), the most frequent read) no allocation: a lookup of
// what validation found, when the operation is admitted and for its
// response.
func TestDeprecationsCostNothingWithoutUse(t *testing.T) {
	s := graph.NewExecutableSchema(graph.Config{}).Schema()
	docs := querydoc.Extension{Validator: querydoc.NewValidator(s, querydoc.DefaultLimits), Cache: querydoc.NewCache(0)}
	e := newDeprecationsExtension(prometheus.NewRegistry(), docs.Validator.Deprecated())
	q := `query TaskByID($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`
	ctx, rc := prepareOperation(t, docs, s, q, map[string]any{"id": "6f1c0c36-5d3e-4c49-9a57-2b3a1f6f0b8e"})
	resp := &graphql.Response{}
	if n := testing.AllocsPerRun(1000, func() {
		if err := e.MutateOperationContext(ctx, rc); err != nil {
			t.Fatal(err)
		}
		withDeprecations(ctx, resp)
	}); n != 0 || resp.Extensions != nil {
		t.Errorf("the deprecations of task(id) allocate %v times (extensions %v), want 0 (none)", n, resp.Extensions)
	}
}

// A deprecated input field or enum value is counted and told by its schema
// coordinate (Input.field, Enum.VALUE) like a field, whether the document
// writes it or a variable's value carries it; each series is there from the
// start. TaskFlow's schema deprecates neither today: this one does.
func TestDeprecatedInputFieldsAndEnumValuesAreCounted(t *testing.T) {
	s := gqlparser.MustLoadSchema(&ast.Source{Name: "inputs.graphql", Input: `
type Query { tasks(filter: TaskFilter, status: Status): Int }
type Mutation { createTask(input: CreateTaskInput!): Int }
input CreateTaskInput { title: String! oldField: String @deprecated(reason: "use title") status: Status }
input TaskFilter { status: [Status!] }
enum Status { OPEN DONE OLD @deprecated(reason: "use DONE") }
`})
	docs := querydoc.Extension{Validator: querydoc.NewValidator(s, querydoc.DefaultLimits), Cache: querydoc.NewCache(0)}
	e := newDeprecationsExtension(prometheus.NewRegistry(), docs.Validator.Deprecated())
	// Counted before count makes a series (WithLabelValues would).
	if n := testutil.CollectAndCount(e.uses); n != 2 {
		t.Fatalf("%d series before any use, want 2", n)
	}
	count := func(f string) float64 { return testutil.ToFloat64(e.uses.WithLabelValues(f)) }
	if count("CreateTaskInput.oldField") != 0 || count("Status.OLD") != 0 {
		t.Fatal("a series not at 0 before any use")
	}
	for _, c := range []struct {
		query string
		vars  map[string]any
		want  []string
	}{
		{`mutation { createTask(input: {title: "t", oldField: "x"}) }`, nil, []string{"CreateTaskInput.oldField"}},
		{`mutation($in: CreateTaskInput!) { createTask(input: $in) }`,
			map[string]any{"in": map[string]any{"title": "t", "oldField": "x", "status": "OLD"}},
			[]string{"CreateTaskInput.oldField", "Status.OLD"}},
		{`mutation($in: CreateTaskInput!) { createTask(input: $in) }`, map[string]any{"in": map[string]any{"title": "t", "status": "OPEN"}}, nil},
		{`query($f: TaskFilter) { tasks(filter: $f) }`, map[string]any{"f": map[string]any{"status": []any{"OPEN", "OLD"}}}, []string{"Status.OLD"}},
		{`query { tasks(status: OLD) }`, nil, []string{"Status.OLD"}},
	} {
		ctx, rc := prepareOperation(t, docs, s, c.query, c.vars)
		before := map[string]float64{"CreateTaskInput.oldField": count("CreateTaskInput.oldField"), "Status.OLD": count("Status.OLD")}
		if err := e.MutateOperationContext(ctx, rc); err != nil {
			t.Fatal(err)
		}
		resp := &graphql.Response{}
		withDeprecations(ctx, resp)
		var told []string
		if uses, ok := resp.Extensions[deprecationsKey].([]querydoc.Deprecated); ok {
			for _, d := range uses {
				told = append(told, d.Field)
			}
		}
		if !slices.Equal(told, c.want) {
			t.Errorf("%s %v: extensions.deprecations %v, want %v", c.query, c.vars, told, c.want)
		}
		for f, n := range before {
			want := 0.0
			if slices.Contains(c.want, f) {
				want = 1
			}
			if got := count(f) - n; got != want {
				t.Errorf("%s %v: %s counted %v times, want %v", c.query, c.vars, f, got, want)
			}
		}
	}
}
