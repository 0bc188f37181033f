// Package inorder marshals a list's elements one after another, in the
// request's goroutine, when nothing selected below them resolves
// concurrently. gqlgen (v0.17.98) marshals every element of a list of
// objects in a goroutine of its own, so that the resolvers of different
// elements run together and their loaders batch; for a page of tasks' plain
// fields (id, title, status) nothing waits on anything, and the goroutines,
// their stacks and the wait for them were a quarter of the server's time per
// request (docs/decisions/2026-12-03-lists-in-order.md). The generator in
// inorder/gen rewrites gqlgen's list marshalers to call MarshalSlice with
// Schema.InOrder's answer; a list whose selection reaches a concurrent field
// (a resolver, or a method that takes a context) keeps gqlgen's goroutines.
package inorder

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// Field is what InOrder needs to know of an object type's field.
type Field struct {
	// Concurrent says gqlgen resolves the field in a goroutine of its own
	// (it has a resolver or takes a context), or that its type is an
	// interface or a union, whose fields the walk does not follow.
	Concurrent bool
	// Type is the name of the field's object type (of its elements, for a
	// list), "" for a scalar or an enum.
	Type string
}

// Schema is the fields of each object type, by type and field name, as the
// generator read them from gqlgen's model of the schema.
type Schema map[string]map[string]Field

// maxDepth bounds InOrder's walk; a deeper selection keeps the goroutines.
// The documents' own depth limit (querydoc) is lower.
const maxDepth = 32

// InOrder reports whether the elements of a list of typ, with selection sel,
// may be marshaled one after another: no field selected below them, through
// fragments and object fields of any depth, is concurrent. It answers false
// for a type it does not know, a field it does not know (a fragment on
// another type), a @defer, and a selection deeper than maxDepth.
func (s Schema) InOrder(typ string, sel ast.SelectionSet) bool {
	return s.inOrder(typ, sel, 0)
}

func (s Schema) inOrder(typ string, sel ast.SelectionSet, depth int) bool {
	fields, ok := s[typ]
	if !ok || depth > maxDepth {
		return false
	}
	for _, x := range sel {
		switch x := x.(type) {
		case *ast.Field:
			if x.Name == "__typename" {
				continue
			}
			f, ok := fields[x.Name]
			if !ok || f.Concurrent || f.Type != "" && !s.inOrder(f.Type, x.SelectionSet, depth+1) {
				return false
			}
		case *ast.InlineFragment:
			if x.Directives.ForName("defer") != nil || !s.inOrder(typ, x.SelectionSet, depth+1) {
				return false
			}
		case *ast.FragmentSpread:
			if x.Directives.ForName("defer") != nil || x.Definition == nil || !s.inOrder(typ, x.Definition.SelectionSet, depth+1) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// MarshalSlice marshals the n elements of a list with marshal: one after
// another when inOrder, each with its own field context (its index) and
// its panic recovered into a null and an error, as gqlgen's
// graphql.MarshalSliceConcurrently does in its goroutines; otherwise with
// graphql.MarshalSliceConcurrently itself.
func MarshalSlice(ctx context.Context, inOrder bool, n int, marshal func(ctx context.Context, i int) graphql.Marshaler) graphql.Array {
	if !inOrder {
		return graphql.MarshalSliceConcurrently(ctx, n, 0, false, marshal)
	}
	ret := make(graphql.Array, n)
	for i := range n {
		ret[i] = marshalOne(graphql.WithFieldContext(ctx, &graphql.FieldContext{Index: &i}), i, marshal)
	}
	return ret
}

// marshalOne marshals element i, a panic recovered into a null and an error.
func marshalOne(ctx context.Context, i int, marshal func(ctx context.Context, i int) graphql.Marshaler) (m graphql.Marshaler) {
	defer func() {
		if r := recover(); r != nil {
			graphql.AddError(ctx, graphql.Recover(ctx, r))
			m = graphql.Null
		}
	}()
	return marshal(ctx, i)
}
