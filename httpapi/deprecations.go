package httpapi

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/promreg"
	"taskflow/querydoc"
)

// deprecationsExtension is the gqlgen extension that reports the deprecated
// fields and arguments an operation uses (querydoc.DeprecatedUses, found
// from the schema's @deprecated directives when its document was
// validated), so that their removal can be planned from what clients do:
// each operation admitted to execute counts once per deprecated field or
// argument it uses in taskflow_deprecated_field_uses_total and names them
// in the access log (deprecated=...); its responses carry
// extensions.deprecations (withDeprecations, called by operationMetrics).
// Install it after every extension that may refuse an operation.
//
// It is an operation context mutator, not an operation interceptor:
// gqlgen's executor makes a closure for each operation an interceptor sees,
// and an operation that uses nothing deprecated must cost a lookup and no
// allocation.
type deprecationsExtension struct {
	uses *prometheus.CounterVec
}

var (
	_ graphql.HandlerExtension        = deprecationsExtension{}
	_ graphql.OperationContextMutator = deprecationsExtension{}
)

// deprecationsKey is the key of extensions.deprecations.
const deprecationsKey = "deprecations"

// newDeprecationsExtension registers the counter in reg, with a series at 0
// for each of deprecated (the schema's), so that a field no client uses shows
// as such rather than as no data.
func newDeprecationsExtension(reg prometheus.Registerer, deprecated []querydoc.Deprecated) deprecationsExtension {
	uses := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskflow_deprecated_field_uses_total",
		Help: "Operations executed that use a deprecated field or argument, by its schema coordinate (Type.field, Type.field(argument:)); an operation counts once per field.",
	}, []string{"field"}))
	for _, d := range deprecated {
		uses.WithLabelValues(d.Field)
	}
	return deprecationsExtension{uses: uses}
}

// ExtensionName names the extension for gqlgen.
func (deprecationsExtension) ExtensionName() string { return "TaskflowDeprecations" }

// Validate accepts every schema.
func (deprecationsExtension) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext counts and notes the deprecated uses of rc's
// operation, which is about to execute.
func (e deprecationsExtension) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	uses := querydoc.DeprecatedUses(rc)
	if len(uses) == 0 {
		return nil
	}
	fields := make([]string, len(uses))
	for i, d := range uses {
		e.uses.WithLabelValues(d.Field).Inc()
		fields[i] = d.Field
	}
	noteFrom(ctx).setDeprecated(strings.Join(fields, ","))
	return nil
}

// withDeprecations adds to resp, a response of the operation of ctx,
// extensions.deprecations: the deprecated fields and arguments the
// operation uses, with their reasons. It does nothing for an operation that
// uses none.
func withDeprecations(ctx context.Context, resp *graphql.Response) {
	if !graphql.HasOperationContext(ctx) {
		return
	}
	uses := querydoc.DeprecatedUses(graphql.GetOperationContext(ctx))
	if len(uses) == 0 {
		return
	}
	if resp.Extensions == nil {
		resp.Extensions = map[string]any{}
	}
	resp.Extensions[deprecationsKey] = uses
}
