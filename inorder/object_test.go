package inorder

import (
	"bytes"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// Object writes what gqlgen's FieldSet writes: each response name once, the
// first value of a name given twice, names escaped as JSON strings.
func TestObjectMarshalsAsFieldSet(t *testing.T) {
	t.Parallel()
	for _, aliases := range [][]string{
		{},
		{"id"},
		{"id", "title", "status"},
		{"a", "b", "a", "c", "b"},
		{"quote\"d", "back\\slash", "tab\t", "é"},
	} {
		fields := make([]graphql.CollectedField, len(aliases))
		for i, a := range aliases {
			fields[i] = graphql.CollectedField{Field: &ast.Field{Alias: a, Name: a}}
		}
		out := graphql.NewFieldSet(fields)
		for i := range aliases {
			out.Values[i] = graphql.MarshalInt(i)
		}
		var want, got bytes.Buffer
		out.MarshalGQL(&want)
		Object(fields, out).MarshalGQL(&got)
		if got.String() != want.String() {
			t.Errorf("%q: %s, want %s", aliases, got.String(), want.String())
		}
	}
}

// An object costs one allocation to return and none to write.
func TestObjectAllocations(t *testing.T) {
	fields := []graphql.CollectedField{{Field: &ast.Field{Alias: "id"}}, {Field: &ast.Field{Alias: "title"}}}
	out := graphql.NewFieldSet(fields)
	out.Values[0], out.Values[1] = graphql.Null, graphql.True
	var buf bytes.Buffer
	buf.Grow(64)
	if n := testing.AllocsPerRun(100, func() {
		buf.Reset()
		Object(fields, out).MarshalGQL(&buf)
	}); n > 1 {
		t.Errorf("%v allocations", n)
	}
}
