package httpapi

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"taskflow/errs"
	"taskflow/ratelimit"
)

// tracerName is the instrumentation scope of the GraphQL spans.
const tracerName = "taskflow/httpapi"

// Attributes of the GraphQL spans that no semantic convention names.
const (
	// attrCost is the operation's requested cost (extensions.cost.requestedQueryCost).
	attrCost = attribute.Key("taskflow.graphql.cost")
	// attrOutcome is "ok" or the code of the response's first error, as the
	// metrics and the access log report it.
	attrOutcome = attribute.Key("taskflow.graphql.outcome")
	// attrFieldName and attrFieldPath name a root field's span.
	attrFieldName = attribute.Key("graphql.field.name")
	attrFieldPath = attribute.Key("graphql.field.path")
)

// maxSpanOperationName is the longest operation name put in a span's name; a
// longer one (names come from clients) leaves the span named by the type alone.
const maxSpanOperationName = 100

// operationSpan is the span of one GraphQL operation, from reading the request
// to writing the response: parse, validation, cost check, execution. A nil
// *operationSpan is tracing off, and its methods do nothing.
type operationSpan struct{ span trace.Span }

// startOperation starts the operation's span under the HTTP server span of ctx,
// or returns ctx and nil when tracer is nil.
func startOperation(ctx context.Context, tracer trace.Tracer) (context.Context, *operationSpan) {
	if tracer == nil {
		return ctx, nil
	}
	ctx, span := tracer.Start(ctx, "GraphQL Operation", trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, &operationSpan{span}
}

// record names the span as the semantic conventions for GraphQL server spans
// say ("query TaskByID", "mutation" when unnamed), with the operation's type
// and name, its cost when the limiter priced it, and its outcome: "ok" or the
// first error's code, which is also error.type; only INTERNAL (a bug) makes
// the span's status an error.
func (s *operationSpan) record(rc *graphql.OperationContext, outcome string, o *ratelimit.Outcome) {
	if s == nil {
		return
	}
	if rc != nil && rc.Operation != nil {
		typ, name := string(rc.Operation.Operation), rc.Operation.Name
		s.span.SetAttributes(semconv.GraphQLOperationTypeKey.String(typ))
		if name != "" {
			s.span.SetAttributes(semconv.GraphQLOperationName(name))
		}
		if name != "" && len(name) <= maxSpanOperationName {
			s.span.SetName(typ + " " + name)
		} else {
			s.span.SetName(typ)
		}
	}
	if o != nil {
		s.span.SetAttributes(attrCost.Int64(o.Cost))
	}
	setOutcome(s.span, outcome, nil)
}

// end ends the span.
func (s *operationSpan) end() {
	if s != nil {
		s.span.End()
	}
}

// setOutcome records outcome on span; err, when the outcome is INTERNAL, is
// recorded as the span's exception (the trace backend is the operators', so
// the error's text may go there, never to the API user).
func setOutcome(span trace.Span, outcome string, err error) {
	span.SetAttributes(attrOutcome.String(outcome))
	if outcome == "ok" {
		return
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
	if outcome == string(errs.CodeInternal) || outcome == "error" {
		if err != nil {
			span.RecordError(err)
		}
		span.SetStatus(codes.Error, outcome)
	}
}

// rootFieldSpans is the gqlgen extension that makes a span of every root field
// (Query.task, Mutation.createTask) while it resolves, so that an operation
// with several root fields shows which one took the time. Fields below the
// root get no span: most are plain struct fields, and the ones that load do
// so through the request's loaders in batches, whose Postgres spans are in the
// trace anyway; a span per element of a page would cost more than it tells.
// It is only installed with tracing on, before the other extensions, so that
// its span holds the unit of work of a mutation's field.
type rootFieldSpans struct{ tracer trace.Tracer }

var (
	_ graphql.HandlerExtension        = rootFieldSpans{}
	_ graphql.OperationContextMutator = rootFieldSpans{}
)

// ExtensionName names the extension for gqlgen.
func (rootFieldSpans) ExtensionName() string { return "TaskflowRootFieldSpans" }

// Validate accepts every schema.
func (rootFieldSpans) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext wraps the operation's field middleware: a root
// field resolves in a span named "Query.task", every other field goes
// through as it is, with no allocation. It is not a gqlgen field
// interceptor, which gqlgen would call, and allocate a link of its chain
// for, around every field (docs/decisions/2026-12-03-lists-in-order.md,
// addendum).
func (e rootFieldSpans) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	outer := oc.ResolverMiddleware
	oc.ResolverMiddleware = func(ctx context.Context, next graphql.Resolver) (any, error) {
		fc := graphql.GetFieldContext(ctx)
		if fc == nil || fc.Field.Field == nil || fc.Parent != nil && fc.Parent.Field.Field != nil {
			// Not a root field: the parent of a root field is the
			// operation's context, which has no field.
			return outer(ctx, next)
		}
		ctx, span := e.tracer.Start(ctx, fc.Object+"."+fc.Field.Name, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attrFieldName.String(fc.Field.Name), attrFieldPath.String(fc.Field.Alias)))
		defer span.End()
		res, err := outer(ctx, next)
		outcome := "ok"
		if err != nil {
			outcome = string(errs.CodeOf(err))
		}
		setOutcome(span, outcome, err)
		return res, err
	}
	return nil
}
