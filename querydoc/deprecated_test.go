package querydoc

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/schema"
)

// deprecatedSchema has a deprecated field, a deprecated argument, a
// deprecated field of an interface and a field without either; a deprecated
// input field and enum value, reached through input objects and lists; and
// an input type and an enum with nothing deprecated.
var deprecatedSchema = gqlparser.MustLoadSchema(&ast.Source{Name: "deprecated.graphql", Input: `
type Query {
  a: Int
  old: Int @deprecated(reason: "use a")
  search(q: String, legacy: Boolean @deprecated(reason: "ignored")): [Node!]!
  bare: Int @deprecated
  find(f: Filter, s: State, ss: [State!], p: Plain, c: Color): Int
}
interface Node { id: ID! name: String @deprecated(reason: "use id") }
type Thing implements Node { id: ID! name: String sub: Thing }
input Filter {
  q: String
  old: String @deprecated(reason: "use q")
  sub: Filter
  state: State
  states: [State!]
}
enum State { ON OFF @deprecated(reason: "use ON") }
input Plain { q: String c: Color }
enum Color { RED GREEN }
`})

// prepare runs Extension on query and returns the operation context as
// gqlgen would make it, with name's operation selected.
func prepare(t testing.TB, e Extension, query, name string) *graphql.OperationContext {
	t.Helper()
	return prepareWith(t, e, query, name, nil)
}

// prepareWith is prepare with the variables vars, coerced as gqlgen's
// executor coerces them before any operation context mutator runs.
func prepareWith(t testing.TB, e Extension, query, name string, vars map[string]any) *graphql.OperationContext {
	t.Helper()
	rc := &graphql.OperationContext{}
	ctx := graphql.WithOperationContext(context.Background(), rc)
	if err := e.MutateOperationParameters(ctx, &graphql.RawParams{Query: query, OperationName: name}); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	p := preparedOf(rc)
	rc.Doc = p.doc
	rc.Operation = p.doc.Operations.ForName(name)
	coerced, err := validator.VariableValues(e.Validator.schema, rc.Operation, vars)
	if err != nil {
		t.Fatalf("%s %v: %v", name, vars, err)
	}
	rc.Variables = coerced
	return rc
}

func fields(ds []Deprecated) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Field)
	}
	return out
}

// DeprecatedUses names the deprecated fields and arguments each operation of
// a document reaches, through fragments and inline fragments, each once and
// sorted; a use in another operation of the document, or a deprecated
// argument's field with the argument left out, is not one. The same answer
// comes from the cache.
func TestDeprecatedUses(t *testing.T) {
	t.Parallel()
	e := Extension{Validator: NewValidator(deprecatedSchema, DefaultLimits), Cache: NewCache(0)}
	if got := fields(e.Validator.Deprecated()); !slices.Equal(got, []string{"Filter.old", "Node.name", "Query.bare", "Query.old", "Query.search(legacy:)", "State.OFF"}) {
		t.Errorf("Deprecated() = %v", got)
	}
	doc := `query Clean { a search(q: "x") { id } }
	query Old { a old bare old }
	query Arg { search(legacy: true) { ...F } }
	query Inline { search { ... on Thing { sub { sub { name } } } } }
	fragment F on Node { id name }`
	for _, c := range []struct {
		op   string
		want []string
	}{
		{"Clean", nil},
		{"Old", []string{"Query.bare", "Query.old"}},
		{"Arg", []string{"Node.name", "Query.search(legacy:)"}},
		{"Inline", nil}, // Thing.name is not deprecated, Node.name is
	} {
		for _, from := range []string{"validated", "cached"} {
			rc := prepare(t, e, doc, c.op)
			if got := fields(DeprecatedUses(rc)); !slices.Equal(got, c.want) {
				t.Errorf("%s (%s): %v, want %v", c.op, from, got, c.want)
			}
		}
	}
	uses := DeprecatedUses(prepare(t, e, doc, "Old"))
	if uses[1].Reason != "use a" || uses[0].Reason != "No longer supported" {
		t.Errorf("reasons: %+v", uses)
	}
}

// A deprecated input field or enum value is a use wherever the operation
// passes it: written in an argument (in an input object, a list, or a single
// value where a list is expected, through fragments too), or in a
// variable's value, sent or its default, at any depth; each once, sorted
// with the fields and arguments. An operation whose variables could not
// carry one has nothing to read in them.
func TestDeprecatedInputUses(t *testing.T) {
	t.Parallel()
	e := Extension{Validator: NewValidator(deprecatedSchema, DefaultLimits), Cache: NewCache(0)}
	doc := `query Lit { find(f: {q: "x", sub: {sub: {old: "y"}}}) }
	query LitEnum { find(ss: [ON, OFF]) }
	query LitSingle { ...F }
	query LitClean { find(f: {q: "x", sub: {state: ON, states: [ON]}}, s: ON, p: {c: RED}, c: GREEN) }
	query Var($f: Filter, $s: State, $ss: [State!]) { find(f: $f, s: $s, ss: $ss) }
	query Default($s: State = OFF) { find(s: $s) }
	query Mixed($f: Filter) { old find(f: {sub: $f}) }
	query Plain($p: Plain, $c: Color, $q: String) { find(p: $p, c: $c, f: {q: $q}) }
	fragment F on Query { find(f: {states: OFF}) }`
	for _, c := range []struct {
		op   string
		vars map[string]any
		want []string
	}{
		{"Lit", nil, []string{"Filter.old"}},
		{"LitEnum", nil, []string{"State.OFF"}},
		{"LitSingle", nil, []string{"State.OFF"}},
		{"LitClean", nil, nil},
		{"Var", nil, nil},
		{"Var", map[string]any{"f": map[string]any{"q": "x", "state": "ON"}, "s": "ON", "ss": []any{"ON"}}, nil},
		{"Var", map[string]any{"f": map[string]any{"old": "x"}}, []string{"Filter.old"}},
		{"Var", map[string]any{"f": map[string]any{"sub": map[string]any{"states": []any{"ON", "OFF"}}}}, []string{"State.OFF"}},
		{"Var", map[string]any{"s": "OFF", "f": map[string]any{"old": nil}}, []string{"Filter.old", "State.OFF"}},
		{"Var", map[string]any{"ss": "OFF"}, []string{"State.OFF"}}, // one value for a list
		{"Default", nil, []string{"State.OFF"}},
		{"Default", map[string]any{"s": "ON"}, nil},
		{"Mixed", map[string]any{"f": map[string]any{"old": "x"}}, []string{"Filter.old", "Query.old"}},
		{"Mixed", nil, []string{"Query.old"}},
		{"Plain", map[string]any{"p": map[string]any{"c": "RED"}, "c": "GREEN", "q": "x"}, nil},
	} {
		for _, from := range []string{"validated", "cached"} {
			rc := prepareWith(t, e, doc, c.op, c.vars)
			got := fields(DeprecatedUses(rc))
			if !slices.Equal(got, c.want) {
				t.Errorf("%s %v (%s): %v, want %v", c.op, c.vars, from, got, c.want)
			}
			if again := fields(DeprecatedUses(rc)); !slices.Equal(again, got) {
				t.Errorf("%s %v (%s): %v, then %v", c.op, c.vars, from, got, again)
			}
		}
	}
	uses := DeprecatedUses(prepareWith(t, e, doc, "Var", map[string]any{"s": "OFF", "f": map[string]any{"old": "x"}}))
	if len(uses) != 2 || uses[0].Reason != "use q" || uses[1].Reason != "use ON" {
		t.Errorf("reasons: %+v", uses)
	}
	// The same document's other request, with other variables, has its own.
	if got := fields(DeprecatedUses(prepareWith(t, e, doc, "Var", nil))); got != nil {
		t.Errorf("Var without variables after Var with them: %v", got)
	}
	// Variables of types that cannot carry a deprecated input field or enum
	// value are not kept to be read.
	d, _, errs := e.Validator.Prepare(doc)
	if errs != nil {
		t.Fatal(errs)
	}
	if u := e.Validator.deprecated.usesIn(d); u.ops[d.Operations.ForName("Plain")] != nil || u.ops[d.Operations.ForName("LitClean")] != nil {
		t.Errorf("Plain or LitClean kept to be read: %+v %+v", u.ops[d.Operations.ForName("Plain")], u.ops[d.Operations.ForName("LitClean")])
	}
}

// Before gqlgen has coerced an operation's variables (or when they did not
// coerce: the operation is refused as invalid) its uses are not known, and
// none is reported, not even those its document writes.
func TestDeprecatedUsesNeedTheVariables(t *testing.T) {
	t.Parallel()
	e := Extension{Validator: NewValidator(deprecatedSchema, DefaultLimits), Cache: NewCache(0)}
	rc := prepare(t, e, `query Old { old }`, "Old")
	rc.Variables = nil
	if got := DeprecatedUses(rc); got != nil {
		t.Errorf("uses before the variables were coerced: %v", got)
	}
	rc.Variables = map[string]any{}
	if got := fields(DeprecatedUses(rc)); !slices.Equal(got, []string{"Query.old"}) {
		t.Errorf("uses once they were: %v", got)
	}
}

// Fragments that spread each other twice at every level, 2^20 paths to one
// deprecated field: the walk reads each fragment once and reports the field
// once.
func TestDeprecatedUsesOfDoublingFragments(t *testing.T) {
	t.Parallel()
	e := Extension{Validator: NewValidator(deprecatedSchema, Limits{}), Cache: NewCache(0)}
	var b strings.Builder
	b.WriteString("query Q { ...F0 }\n")
	for i := range 20 {
		fmt.Fprintf(&b, "fragment F%d on Query { a ...F%d ...F%d }\n", i, i+1, i+1)
	}
	b.WriteString("fragment F20 on Query { old }\n")
	doc, _, errs := e.Validator.Prepare(b.String())
	if errs != nil {
		t.Fatal(errs)
	}
	if got := fields(e.Validator.deprecated.usesIn(doc).ops[doc.Operations[0]].static); !slices.Equal(got, []string{"Query.old"}) {
		t.Errorf("uses = %v", got)
	}
}

// The set is TaskFlow's schema's @deprecated directives, not a list kept by
// hand: every field and argument the schema files mark, and nothing else.
func TestDeprecatedIsTheSchemas(t *testing.T) {
	t.Parallel()
	sources, err := schema.Sources()
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, s := range sources {
		marked += len(regexp.MustCompile(`@deprecated\b`).FindAllString(s.Input, -1))
	}
	got := NewValidator(taskflowSchema, DefaultLimits).Deprecated()
	if len(got) != marked || marked < 3 {
		t.Errorf("Deprecated() = %v: %d, but the schema files have %d @deprecated", fields(got), len(got), marked)
	}
	for _, want := range []string{"Workspace.members", "User.workspaces", "Mutation.addMember"} {
		if !slices.Contains(fields(got), want) {
			t.Errorf("Deprecated() = %v, without %s", fields(got), want)
		}
	}
}

// An operation that uses nothing deprecated pays one lookup for it, without
// an allocation, whether its document was just validated or came from the
// cache; so does task(id), the most frequent read.
func TestDeprecatedUsesAllocateNothing(t *testing.T) {
	e := Extension{Validator: NewValidator(taskflowSchema, DefaultLimits), Cache: NewCache(0)}
	q := `query TaskByID($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`
	vars := map[string]any{"id": "6f1c0c36-5d3e-4c49-9a57-2b3a1f6f0b8e"}
	rc := prepareWith(t, e, q, "TaskByID", vars)
	if n := testing.AllocsPerRun(1000, func() {
		if DeprecatedUses(rc) != nil {
			t.Fatal("task(id) uses something deprecated")
		}
	}); n != 0 {
		t.Errorf("DeprecatedUses allocates %v times an operation, want 0", n)
	}
	if p := preparedOf(prepareWith(t, e, q, "TaskByID", vars)); p.uses != nil {
		t.Errorf("a cached task(id) has deprecated uses %v", p.uses)
	}
}

// BenchmarkDeprecatedUsesOfVariables reads an operation's variables for
// deprecated input fields and enum values, as each request of an operation
// with a variable of a carrier type has them read once: a filter of three
// levels with a list of enum values, without a deprecated one ("clean") and
// with one at the bottom ("deprecated", whose list is then built and kept).
func BenchmarkDeprecatedUsesOfVariables(b *testing.B) {
	e := Extension{Validator: NewValidator(deprecatedSchema, DefaultLimits), Cache: NewCache(0)}
	q := `query Var($f: Filter, $s: State) { a find(f: $f, s: $s) }`
	for _, c := range []struct {
		name  string
		state string
		want  int
	}{{"clean", "ON", 0}, {"deprecated", "OFF", 1}} {
		b.Run(c.name, func(b *testing.B) {
			vars := map[string]any{"s": "ON", "f": map[string]any{"q": "x", "sub": map[string]any{"q": "y",
				"sub": map[string]any{"state": "ON", "states": []any{"ON", "ON", c.state}}}}}
			rc := prepareWith(b, e, q, "Var", vars)
			b.ReportAllocs()
			for b.Loop() {
				rc.Stats.SetExtension(variableUsesKey, nil) // another request's
				if got := DeprecatedUses(rc); len(got) != c.want {
					b.Fatalf("%v", got)
				}
			}
		})
	}
}
