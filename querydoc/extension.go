package querydoc

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/cpumeter"
)

// Extension is the gqlgen handler extension that parses and validates the
// document of every operation with Validator, through Cache. Install it after
// the extension that resolves persisted queries (it needs the query text),
// and give the executor ExecutorCache (handler.Server.SetQueryCache): the
// executor then takes the document Extension validated instead of parsing and
// validating it again with its own, unbounded, pipeline.
//
// gqlgen lets an extension refuse an operation with one error; when a
// document has several, the transport shows them all by asking Errors.
type Extension struct {
	Validator *Validator
	Cache     *Cache
}

var (
	_ graphql.HandlerExtension          = Extension{}
	_ graphql.OperationParameterMutator = Extension{}
)

// statsKey is where Extension leaves its outcome in the operation's stats.
const statsKey = "taskflow.querydoc"

// prepared is the outcome of Extension for one operation.
type prepared struct {
	query  string
	doc    *ast.QueryDocument // validated
	parsed *ast.QueryDocument // parsed, valid or not
	shape  Shape              // of a validated document
	uses   *deprecatedUses    // of a validated document
	secret bool               // a validated document holds a secret (SecretIn)
	errs   gqlerror.List
}

// ExtensionName names the extension.
func (Extension) ExtensionName() string { return "QueryDocument" }

// Validate accepts any schema.
func (Extension) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationParameters validates the operation's document, or takes it
// from the cache, and leaves it for ExecutorCache with the deprecated members
// its operations use or may use through their variables (DeprecatedUses) and
// whether it writes a secret (HoldsSecret), found once per document; it
// refuses a document that does not parse, is
// over a limit or is invalid.
func (e Extension) MutateOperationParameters(ctx context.Context, p *graphql.RawParams) *gqlerror.Error {
	if p.Query == "" || !graphql.HasOperationContext(ctx) {
		return nil // gqlgen answers a missing query itself
	}
	rc := graphql.GetOperationContext(ctx)
	refuse := func(parsed *ast.QueryDocument, problems gqlerror.List) *gqlerror.Error {
		rc.Stats.SetExtension(statsKey, &prepared{parsed: parsed, errs: problems})
		// What gqlgen sets once the extensions have run, for those that
		// report on the refused operation (metrics, access log).
		rc.RawQuery, rc.OperationName, rc.Extensions, rc.Headers = p.Query, p.OperationName, p.Extensions, p.Headers
		return problems[0]
	}
	if v, ok := e.Cache.get(p.Query); ok {
		if gqlErr := e.Validator.limits.checkSubscription(p.Query, v.doc, p.OperationName); gqlErr != nil {
			return refuse(v.doc, gqlerror.List{gqlErr})
		}
		rc.Stats.SetExtension(statsKey, &prepared{query: p.Query, doc: v.doc, parsed: v.doc, shape: v.shape, uses: v.uses,
			secret: v.secret})
		return nil
	}
	defer cpumeter.Start(ctx)() // charged to the caller's turn
	doc, problems := e.Validator.Parse(p.Query)
	var shape Shape
	if problems == nil {
		shape, problems = e.Validator.Validate(p.Query, doc)
	}
	if problems != nil {
		return refuse(doc, problems)
	}
	if gqlErr := e.Validator.limits.checkSubscription(p.Query, doc, p.OperationName); gqlErr != nil {
		return refuse(doc, gqlerror.List{gqlErr}) // not cached: the text is what it must not hold
	}
	uses, secret := e.Validator.deprecated.usesIn(doc), SecretIn(doc)
	e.Cache.add(p.Query, cached{doc: doc, shape: shape, uses: uses, secret: secret})
	rc.Stats.SetExtension(statsKey, &prepared{query: p.Query, doc: doc, parsed: doc, shape: shape, uses: uses,
		secret: secret})
	return nil
}

// Heavy reports whether rc's validated document is heavy to execute: more than
// HeavySelections fields (fragments expanded), or aliases times fields over
// HeavyMerge. gqlgen merges each selection set's fields by scanning the
// response names it collected before each one, at execution: a document at
// the limits (256 aliases, then 9,700 fields) costs about 40 ms of CPU there
// (bench/abuse, cache-fill). The transport keeps such a document in its
// caller's turn until it is answered, so that one caller's heavy documents
// use one core of an instance at most.
func Heavy(rc *graphql.OperationContext) bool {
	p := preparedOf(rc)
	if p == nil || p.doc == nil {
		return false
	}
	s := p.shape
	return s.Selections > HeavySelections || int64(s.Aliases)*int64(s.Selections) > HeavyMerge
}

// HeavySelections and HeavyMerge are Heavy's bounds: far above what an
// application's documents select (the introspection query: 100 fields, no
// aliases; a dashboard of 100 aliased tasks of 20 fields: 2,100 fields and a
// product of 210,000).
const (
	HeavySelections = 5000
	HeavyMerge      = 250_000
)

// Errors returns all the errors Extension refused rc's document with (gqlgen
// reports only the first), or nil.
func Errors(rc *graphql.OperationContext) gqlerror.List {
	if p := preparedOf(rc); p != nil {
		return p.errs
	}
	return nil
}

// Parsed returns rc's document as Extension parsed it, valid or not, or nil
// when it did not parse (or Extension did not see it): what reports on a
// refused operation may read, instead of parsing the text again.
func Parsed(rc *graphql.OperationContext) *ast.QueryDocument {
	if p := preparedOf(rc); p != nil {
		return p.parsed
	}
	return nil
}

func preparedOf(rc *graphql.OperationContext) *prepared {
	if rc == nil {
		return nil
	}
	p, _ := rc.Stats.GetExtension(statsKey).(*prepared)
	return p
}

// ExecutorCache is the query cache to give gqlgen's executor: it hands over
// the document Extension validated for the operation. It never keeps a
// document itself: documents enter Cache only through Extension, which knows
// their weight.
type ExecutorCache struct{}

var _ graphql.Cache[*ast.QueryDocument] = ExecutorCache{}

// Get returns the document Extension validated for query in this operation.
func (ExecutorCache) Get(ctx context.Context, query string) (*ast.QueryDocument, bool) {
	if !graphql.HasOperationContext(ctx) {
		return nil, false
	}
	p := preparedOf(graphql.GetOperationContext(ctx))
	if p == nil || p.doc == nil || p.query != query {
		return nil, false
	}
	return p.doc, true
}

// Add does nothing.
func (ExecutorCache) Add(context.Context, string, *ast.QueryDocument) {}
