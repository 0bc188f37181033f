package ratelimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// startRedisCheck starts a client span for a budget check sent to Redis when
// ctx is in a recording trace, and returns nil otherwise (tracing off costs
// nothing here). The check's EVALSHA goes through go-redis's autopipeliner,
// which sends the batched commands of concurrent requests from a goroutine of
// its own: the command's span made by Redis instrumentation has no parent
// there, so this span is the request's view of the round trip.
func startRedisCheck(ctx context.Context, limit string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer("taskflow/ratelimit").Start(ctx, "EVALSHA",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNameRedis, semconv.DBOperationName("EVALSHA"),
			attribute.String("taskflow.ratelimit.limit", limit)))
}

// endRedisCheck ends span (nil: nothing), recording err.
func endRedisCheck(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "Redis check failed")
	}
	span.End()
}
