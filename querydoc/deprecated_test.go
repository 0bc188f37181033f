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

	"taskflow/schema"
)

// deprecatedSchema has a deprecated field, a deprecated argument, a
// deprecated field of an interface and a field without either.
var deprecatedSchema = gqlparser.MustLoadSchema(&ast.Source{Name: "deprecated.graphql", Input: `
type Query {
  a: Int
  old: Int @deprecated(reason: "use a")
  search(q: String, legacy: Boolean @deprecated(reason: "ignored")): [Node!]!
  bare: Int @deprecated
}
interface Node { id: ID! name: String @deprecated(reason: "use id") }
type Thing implements Node { id: ID! name: String sub: Thing }
`})

// prepare runs Extension on query and returns the operation context as
// gqlgen would make it, with name's operation selected.
func prepare(t testing.TB, e Extension, query, name string) *graphql.OperationContext {
	t.Helper()
	rc := &graphql.OperationContext{}
	ctx := graphql.WithOperationContext(context.Background(), rc)
	if err := e.MutateOperationParameters(ctx, &graphql.RawParams{Query: query, OperationName: name}); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	p := preparedOf(rc)
	rc.Doc = p.doc
	rc.Operation = p.doc.Operations.ForName(name)
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
	if got := fields(e.Validator.Deprecated()); !slices.Equal(got, []string{"Node.name", "Query.bare", "Query.old", "Query.search(legacy:)"}) {
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
	if got := fields(e.Validator.deprecated.usesIn(doc)[doc.Operations[0]]); !slices.Equal(got, []string{"Query.old"}) {
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
	rc := prepare(t, e, q, "TaskByID")
	if n := testing.AllocsPerRun(1000, func() {
		if DeprecatedUses(rc) != nil {
			t.Fatal("task(id) uses something deprecated")
		}
	}); n != 0 {
		t.Errorf("DeprecatedUses allocates %v times an operation, want 0", n)
	}
	if p := preparedOf(prepare(t, e, q, "TaskByID")); p.uses != nil {
		t.Errorf("a cached task(id) has deprecated uses %v", p.uses)
	}
}
