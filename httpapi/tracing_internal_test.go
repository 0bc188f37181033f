package httpapi

import (
	"context"
	"errors"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"taskflow/errs"
)

// A root field that fails with a bug is an error span with the error recorded;
// one that fails with a domain error is not an error span; nested fields pass
// through without a span.
func TestRootFieldSpanOutcomes(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ext := rootFieldSpans{tp.Tracer(tracerName)}
	op := &graphql.FieldContext{Object: "Query"} // the operation's context, as gqlgen makes it
	field := func(parent *graphql.FieldContext, name string) context.Context {
		ctx := graphql.WithFieldContext(context.Background(), parent)
		return graphql.WithFieldContext(ctx, &graphql.FieldContext{Object: "Query",
			Field: graphql.CollectedField{Field: &ast.Field{Name: name, Alias: name}}})
	}
	// The operation's field middleware as gqlgen makes it with no field
	// interceptor, wrapped by the extension.
	oc := &graphql.OperationContext{ResolverMiddleware: func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) }}
	if err := ext.MutateOperationContext(context.Background(), oc); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection reset by peer")
	_, _ = oc.ResolverMiddleware(field(op, "task"), func(context.Context) (any, error) { return nil, boom })
	_, _ = oc.ResolverMiddleware(field(op, "project"), func(context.Context) (any, error) {
		return nil, errs.Errorf(errs.CodeNotFound, "no such project")
	})
	nested := &graphql.FieldContext{Object: "Task", Field: graphql.CollectedField{Field: &ast.Field{Name: "assignee"}}, Parent: op}
	if res, err := oc.ResolverMiddleware(field(nested, "name"), func(context.Context) (any, error) { return "x", nil }); res != "x" || err != nil {
		t.Errorf("a nested field: %v, %v", res, err)
	}
	if _, ok := any(ext).(graphql.FieldInterceptor); ok {
		t.Error("rootFieldSpans is a field interceptor: gqlgen runs it around every field")
	}

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	task, project := spans[0], spans[1]
	if task.Name() != "Query.task" || task.Status().Code != codes.Error || len(task.Events()) != 1 ||
		task.Events()[0].Name != "exception" {
		t.Errorf("failed root field: %s %v %v", task.Name(), task.Status(), task.Events())
	}
	if project.Name() != "Query.project" || project.Status().Code != codes.Unset || len(project.Events()) != 0 {
		t.Errorf("NOT_FOUND root field: %s %v %v", project.Name(), project.Status(), project.Events())
	}
}
