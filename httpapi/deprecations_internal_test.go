package httpapi

import (
	"context"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/graph"
	"taskflow/querydoc"
)

// The deprecations extension costs an operation that uses nothing
// deprecated (task(id), the most frequent read) no allocation: a lookup of
// what validation found, when the operation is admitted and for its
// response.
func TestDeprecationsCostNothingWithoutUse(t *testing.T) {
	s := graph.NewExecutableSchema(graph.Config{}).Schema()
	docs := querydoc.Extension{Validator: querydoc.NewValidator(s, querydoc.DefaultLimits), Cache: querydoc.NewCache(0)}
	e := newDeprecationsExtension(prometheus.NewRegistry(), docs.Validator.Deprecated())
	q := `query TaskByID($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`
	rc := &graphql.OperationContext{}
	ctx := graphql.WithOperationContext(context.Background(), rc)
	if err := docs.MutateOperationParameters(ctx, &graphql.RawParams{Query: q}); err != nil {
		t.Fatal(err)
	}
	rc.Doc, _ = querydoc.ExecutorCache{}.Get(ctx, q)
	rc.Operation = rc.Doc.Operations[0]
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
