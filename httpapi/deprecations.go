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
// members an operation uses (querydoc.DeprecatedUses: fields, arguments,
// input fields and enum values, in its document or its variables, found
// from the schema's @deprecated directives), so that their removal can be
// planned from what clients do. Each operation whose document and variables
// are valid counts once per deprecated member it uses in
// taskflow_deprecated_field_uses_total and names them in the access log
// (deprecated=...), whether it then executes or is refused (over its cost,
// over the budget, a string the database cannot store, a mutation by GET,
// a replay refused...): a refused operation is a client using them all the
// same, and one the removal would break. Its responses carry
// extensions.deprecations (withDeprecations, called by operationMetrics).
// An operation refused as invalid (its document or its variables) is
// neither counted nor told: it runs with or without the member. Install it
// right after querydoc.Extension, before every extension that may refuse
// an operation.
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
		Help: "Operations with a valid document and variables, executed or refused, that use a deprecated field, argument, input field or enum value, by its schema coordinate (Type.field, Type.field(argument:), Input.field, Enum.VALUE); an operation counts once per member.",
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
// operation, whose document and variables are valid, before any later
// extension may refuse it.
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
// extensions.deprecations: the deprecated members the operation uses, with
// their reasons. It does nothing for an operation that uses none, and for
// one refused as invalid.
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

// deprecationsOnly returns extensions holding only ext's deprecations
// (withDeprecations), or nil when it has none: those of an answer that
// carries no other extension (a 429, a refused event stream).
func deprecationsOnly(ext map[string]any) map[string]any {
	if d, ok := ext[deprecationsKey]; ok {
		return map[string]any{deprecationsKey: d}
	}
	return nil
}
