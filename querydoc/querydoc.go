// Package querydoc parses and validates GraphQL documents within bounds: a
// request of any shape within the body limit costs a few milliseconds of CPU
// and a bounded amount of memory before it is refused or admitted.
//
//   - Limits that no real client meets (tokens, fields with fragments
//     expanded, depth, aliases, directives at one location, variables, and
//     the nodes the validator visits) are checked on the parsed document by
//     Measure, in time linear in its size, before any validation rule runs.
//   - The validation rules are gqlparser's, but for the two that took time
//     quadratic in the document: OverlappingFieldsCanBeMerged (replaced by a
//     linear rule of the same semantics) and NoFragmentCycles (the same rule
//     with a map); the rules that compute "Did you mean" suggestions run
//     without them, and at most maxErrors errors are kept. A small document
//     that fails is validated again by gqlparser's own rules, so it gets
//     exactly gqlparser's errors, suggestions included.
//   - Cache keeps validated documents bounded by their estimated bytes, and
//     Extension puts all of it in front of gqlgen's executor.
package querydoc

import (
	"fmt"

	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"
	"github.com/vektah/gqlparser/v2/validator/core"
	"github.com/vektah/gqlparser/v2/validator/rules"

	"taskflow/errs"
	"taskflow/schema"
)

// Limits bound a document. A document over one is refused with
// QUERY_TOO_COSTLY (the token limit: GRAPHQL_PARSE_FAILED, as gqlgen's) and
// a message naming the limit; extensions.limit names it too and
// extensions.maximum gives its value. Zero disables a limit.
type Limits struct {
	// Tokens bounds the lexical tokens of the document (comments included).
	Tokens int
	// Walk bounds the nodes the validator visits: every operation and every
	// fragment definition with the fragments it reaches (Shape.Walk).
	Walk int
	// Selections bounds the fields, with each fragment counted every time it
	// is spread (Shape.Selections).
	Selections int
	// Depth bounds the nesting of fields, through fragments.
	Depth int
	// Aliases bounds the aliased fields as written.
	Aliases int
	// Directives bounds the directives at one location.
	Directives int
	// Variables bounds the variable definitions of one operation.
	Variables int
	// SubscriptionBytes bounds the bytes of a document whose operation to
	// run is a subscription (the document's whole text, its comments and
	// other operations included). Its limit name is "subscriptionBytes".
	SubscriptionBytes int
}

// DefaultLimits are TaskFlow's limits. The standard introspection query
// (GraphiQL's) has about 350 tokens, 100 fields with its fragments expanded,
// depth 15 and no aliases; the playground's examples are smaller.
//   - Tokens 15,000: about 40 times the introspection query.
//   - Walk 25,000 nodes: the validator's work is linear in it (about 1 µs a
//     node on the reference machine); a document within the token limit
//     needs more only by spreading its fragments from many operations or
//     chaining fragments that spread each other.
//   - Selections 10,000 fields with fragments expanded: bounds the linear
//     overlap rule, the cost analysis and the executor's merging of fields.
//   - Depth 32: the introspection query needs 15 (nine ofType); TaskFlow's
//     deepest meaningful path (workspace, projects, tasks, comments, author,
//     with connections' edges and node) about 12.
//   - Aliases 256: a client that needs more fields of one name sends more
//     requests. gqlgen merges a selection set's fields by scanning the
//     response names already collected: 1,000 aliases before 9,000 fields
//     cost 58 ms of CPU per request to execute (bench/abuse, cache-fill).
//   - Directives 10 at one location: @include, @skip, @deprecated and the
//     like; nobody writes ten.
//   - Variables 100 per operation: the validator finds a variable's
//     definition by scanning the operation's (uses times definitions).
var DefaultLimits = Limits{
	Tokens:     15000,
	Walk:       25000,
	Selections: 10000,
	Depth:      32,
	Aliases:    256,
	Directives: 10,
	Variables:  100,

	SubscriptionBytes: 64 << 10,
}

// maxErrors is how many validation errors a document gets, as in graphql-js;
// one more says that the rest were left out.
const maxErrors = 100

// A document is small when its source and its walk are within these: then
// gqlparser's own rules, quadratic in the worst case, cost well under a
// millisecond, and a failing small document is validated again by them so
// that its errors are exactly gqlparser's (with suggestions).
const (
	smallBytes = 8 << 10
	smallWalk  = 200
)

// Validator parses and validates documents against a schema within Limits.
type Validator struct {
	schema     *ast.Schema
	limits     Limits
	deprecated *deprecations
}

// NewValidator returns a Validator of documents against schema.
func NewValidator(schema *ast.Schema, limits Limits) *Validator {
	return &Validator{schema: schema, limits: limits, deprecated: deprecationsOf(schema)}
}

// Deprecated returns every member of the schema marked @deprecated (fields,
// arguments, input fields, enum values), sorted by Field: those
// DeprecatedUses may report.
func (v *Validator) Deprecated() []Deprecated { return v.deprecated.all() }

// Prepare parses query and validates it: it returns the validated document
// and its Shape, or the errors, each coded in extensions.code
// (GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED, QUERY_TOO_COSTLY).
func (v *Validator) Prepare(query string) (*ast.QueryDocument, Shape, gqlerror.List) {
	doc, problems := v.Parse(query)
	if problems != nil {
		return nil, Shape{}, problems
	}
	shape, problems := v.Validate(query, doc)
	if problems != nil {
		return nil, shape, problems
	}
	return doc, shape, nil
}

// Parse parses query within the token limit; a document without operations
// is refused as gqlgen refuses it.
func (v *Validator) Parse(query string) (*ast.QueryDocument, gqlerror.List) {
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: query}, v.limits.Tokens)
	if err != nil {
		gqlErr, ok := err.(*gqlerror.Error)
		if !ok {
			gqlErr = gqlerror.Wrap(err)
		}
		errcode.Set(gqlErr, errcode.ParseFailed)
		return nil, gqlerror.List{gqlErr}
	}
	if len(doc.Operations) == 0 {
		gqlErr := gqlerror.Errorf("no operation provided")
		errcode.Set(gqlErr, errcode.ValidationFailed)
		return doc, gqlerror.List{gqlErr}
	}
	return doc, nil
}

// Validate checks the Limits of doc, parsed from query, and validates it; it
// returns doc's Shape and the errors, if any.
func (v *Validator) Validate(query string, doc *ast.QueryDocument) (Shape, gqlerror.List) {
	shape := Measure(doc, v.limits.Walk)
	if gqlErr := v.limits.check(shape); gqlErr != nil {
		return shape, gqlerror.List{gqlErr}
	}
	problems := v.validate(doc, &shape)
	if len(problems) > 0 && len(query) <= smallBytes && shape.Walk <= smallWalk {
		problems = validator.ValidateWithRules(v.schema, doc, capped(list(defaultRules())))
	}
	for _, e := range problems {
		errcode.Set(e, errcode.ValidationFailed)
	}
	return shape, problems
}

// validate validates doc of the given shape with the linear rules.
func (v *Validator) validate(doc *ast.QueryDocument, shape *Shape) gqlerror.List {
	return validator.ValidateWithRules(v.schema, doc, capped(v.rules(shape)))
}

// Rules returns the rules Prepare validates with, for gqlgen's executor to
// use too (handler.Server.SetDefaultRulesFn) should it ever validate a
// document itself: they are linear, but only Prepare checks the Limits
// first.
func (v *Validator) Rules() *rules.Rules {
	return capped(v.rules(nil))
}

// rules are gqlparser's default rules with the quadratic ones replaced and
// the suggestions left out; shape is the document's, nil when unknown.
func (v *Validator) rules(shape *Shape) []core.Rule {
	r := defaultRules()
	for _, s := range []struct{ with, without core.Rule }{
		{rules.FieldsOnCorrectTypeRule, rules.FieldsOnCorrectTypeRuleWithoutSuggestions},
		{rules.KnownArgumentNamesRule, rules.KnownArgumentNamesRuleWithoutSuggestions},
		{rules.KnownTypeNamesRule, rules.KnownTypeNamesRuleWithoutSuggestions},
		{rules.ScalarLeafsRule, rules.ScalarLeafsRuleWithoutSuggestions},
		{rules.ValuesOfCorrectTypeRule, rules.ValuesOfCorrectTypeRuleWithoutSuggestions},
	} {
		r.RemoveRule(s.with.Name)
		r.AddRule(s.without.Name, s.without.RuleFunc)
	}
	budget := 3*v.limits.Selections + 1000
	if v.limits.Selections <= 0 {
		budget = saturation
	}
	r.ReplaceRule(overlapRuleName, overlapRule(shape, budget).RuleFunc)
	r.ReplaceRule(noFragmentCyclesRule.Name, noFragmentCyclesRule.RuleFunc)
	return list(r)
}

// defaultRules are gqlparser's default rules, but for an unknown directive
// named in schema.Unserved, which gets the reason it is not served instead of
// "Unknown directive".
func defaultRules() *rules.Rules {
	r := rules.NewDefaultRules()
	r.ReplaceRule(rules.KnownDirectivesRule.Name, knownDirectives)
	return r
}

// knownDirectives is gqlparser's KnownDirectives rule, but for a directive
// named in schema.Unserved and absent from the schema: its error is the
// reason from schema.Unserved. The walker calls a rule's observers of one
// directive in the order they were added, so the first one tells the
// gqlparser rule's errors which directive they are about.
func knownDirectives(observers *core.Events, addError core.AddErrFunc) {
	unserved := false
	observers.OnDirective(func(_ *core.Walker, d *ast.Directive) {
		reason, ok := schema.Unserved[d.Name]
		unserved = ok && d.Definition == nil
		if unserved {
			addError(core.Message("%s", reason), core.At(d.Position))
		}
	})
	rules.KnownDirectivesRule.RuleFunc(observers, func(options ...core.ErrorOption) {
		if !unserved {
			addError(options...)
		}
	})
}

// capped returns the rules rs adding at most maxErrors errors, then one that
// says the rest were left out. An error left out is never formatted.
func capped(rs []core.Rule) *rules.Rules {
	count := 0
	out := rules.NewRules()
	for _, r := range rs {
		out.AddRule(r.Name, func(observers *core.Events, addError core.AddErrFunc) {
			r.RuleFunc(observers, func(options ...core.ErrorOption) {
				count++
				switch {
				case count <= maxErrors:
					addError(options...)
				case count == maxErrors+1:
					addError(core.Message("Too many validation errors: the first %d are shown.", maxErrors))
				}
			})
		})
	}
	return out
}

// list returns the rules of r.
func list(r *rules.Rules) []core.Rule {
	var out []core.Rule
	for name, f := range r.GetInner() {
		out = append(out, core.Rule{Name: name, RuleFunc: f})
	}
	return out
}

// checkSubscription returns the error of query, parsed as doc, when the
// operation named operationName is a subscription and query is longer than
// SubscriptionBytes, or nil.
//
// The bound is on the text, not on what it means: a running subscription
// keeps its text for its life (gqlgen's OperationContext.RawQuery, and the
// parsed document, whose every name and string value is a substring of the
// text, not only its Source), and a user may hold 100 subscriptions on an
// instance, so a document of 1 MiB of comments held a megabyte per
// subscription. Letting go of the text after parsing instead would need a
// deep copy of the document with every string cloned, and a document in
// Cache is shared by every request that sends its text; a query or a
// mutation holds its text only while it runs. 64 KiB is the longest text
// stored as a persisted query (apq.MaxQueryBytes), and about 20 times
// GraphiQL's introspection query.
func (l Limits) checkSubscription(query string, doc *ast.QueryDocument, operationName string) *gqlerror.Error {
	if l.SubscriptionBytes <= 0 || len(query) <= l.SubscriptionBytes {
		return nil
	}
	op := doc.Operations.ForName(operationName)
	if op == nil || op.Operation != ast.Subscription {
		return nil
	}
	return &gqlerror.Error{
		Message: fmt.Sprintf("The document of a subscription is %d bytes long; the limit is %d (comments and "+
			"other operations included).", len(query), l.SubscriptionBytes),
		Extensions: map[string]any{
			"code": string(errs.CodeQueryTooCostly), "limit": "subscriptionBytes", "maximum": l.SubscriptionBytes,
		},
	}
}

// check returns the error of the first limit shape is over, or nil.
func (l Limits) check(s Shape) *gqlerror.Error {
	over := func(value, limit int) bool { return limit > 0 && value > limit }
	var name, msg string
	var limit int
	switch {
	case over(s.Walk, l.Walk):
		name, limit = "walk", l.Walk
		msg = fmt.Sprintf("The document is too large to validate: its operations and fragments, each counted "+
			"with the fragments it spreads, have more nodes (fields, arguments, values, directives) than the limit "+
			"of %d.", l.Walk)
	case over(s.Selections, l.Selections):
		name, limit = "selections", l.Selections
		msg = fmt.Sprintf("The document selects %d fields, counting each fragment every time it is spread; "+
			"the limit is %d.", s.Selections, l.Selections)
	case over(s.Depth, l.Depth):
		name, limit = "depth", l.Depth
		msg = fmt.Sprintf("The document nests fields %d deep; the limit is %d.", s.Depth, l.Depth)
	case over(s.Aliases, l.Aliases):
		name, limit = "aliases", l.Aliases
		msg = fmt.Sprintf("The document has %d aliases; the limit is %d.", s.Aliases, l.Aliases)
	case over(s.Directives, l.Directives):
		name, limit = "directives", l.Directives
		msg = fmt.Sprintf("The document has %d directives at one location; the limit is %d.",
			s.Directives, l.Directives)
	case over(s.Variables, l.Variables):
		name, limit = "variables", l.Variables
		msg = fmt.Sprintf("An operation of the document defines %d variables; the limit is %d.",
			s.Variables, l.Variables)
	default:
		return nil
	}
	return &gqlerror.Error{Message: msg, Extensions: map[string]any{
		"code": string(errs.CodeQueryTooCostly), "limit": name, "maximum": limit,
	}}
}
