// Package inorder marshals a list's elements one after another, in the
// request's goroutine, when nothing selected below them resolves
// concurrently. gqlgen (v0.17.98) marshals every element of a list of
// objects in a goroutine of its own, so that the resolvers of different
// elements run together and their loaders batch; for a page of tasks' plain
// fields (id, title, status) nothing waits on anything, and the goroutines,
// their stacks and the wait for them were a quarter of the server's time per
// request (docs/decisions/2026-12-03-lists-in-order.md). The generator in
// inorder/gen rewrites gqlgen's list marshalers to call MarshalSlice with the
// schema's fields, the element type and the selection; a list whose selection reaches a concurrent field
// (a resolver, or a method that takes a context) keeps gqlgen's goroutines,
// unless the list's parent value says those fields are settled (Settler):
// read with the list, so that resolving them waits on nothing. Under a list
// marshaled in order, the generator's ResolveConcurrently resolves an
// object's concurrent fields at once, in the same goroutine, instead of
// gqlgen's one goroutine per field but the first
// (docs/decisions/2026-12-03-settled-pages.md). Object writes an object's
// field set without gqlgen's per-object allocations, and the generator also
// makes the functions of leaf fields marshal their struct field at once,
// without gqlgen's field context (docs/decisions/2026-12-03-leaf-fields.md).
package inorder

import (
	"context"
	"sync/atomic"

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
// another type), a @defer, and a selection deeper than maxDepth. Its walk
// is linear in the document: a fragment is walked once per type it is
// spread in, however often it is spread.
func (s Schema) InOrder(typ string, sel ast.SelectionSet) bool {
	return s.InOrderSettled(typ, sel, nil)
}

// Settler is implemented by a value holding lists (a page of tasks) whose
// elements, and what is below them, have some concurrent fields settled:
// their values were read with the list and wait in the request's loaders,
// so resolving them waits on nothing. Settled reports whether field of
// typ is settled everywhere below the value's lists, for every field of
// that name the request's document selects there.
type Settler interface {
	Settled(typ, field string) bool
}

// InOrderSettled is InOrder where a concurrent field that settled (nil for
// none) reports settled does not stop the walk: it is walked as a plain
// field.
func (s Schema) InOrderSettled(typ string, sel ast.SelectionSet, settled Settler) bool {
	w := walk{schema: s, settled: settled}
	return w.inOrder(typ, sel, 0)
}

// walk is one InOrder: the answers for the fragments it has walked, by type
// and name (false while one is being walked, so that a cycle, which
// validation refuses anyway, answers false).
type walk struct {
	schema    Schema
	settled   Settler
	fragments map[[2]string]bool
}

// plain reports whether the walk may go through field name of typ, f.
func (w *walk) plain(typ, name string, f Field) bool {
	return !f.Concurrent || w.settled != nil && w.settled.Settled(typ, name)
}

func (w *walk) inOrder(typ string, sel ast.SelectionSet, depth int) bool {
	fields, ok := w.schema[typ]
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
			if !ok || !w.plain(typ, x.Name, f) || f.Type != "" && !w.inOrder(f.Type, x.SelectionSet, depth+1) {
				return false
			}
		case *ast.InlineFragment:
			if x.Directives.ForName("defer") != nil || !w.inOrder(typ, x.SelectionSet, depth+1) {
				return false
			}
		case *ast.FragmentSpread:
			if x.Directives.ForName("defer") != nil || x.Definition == nil || !w.fragment(typ, x.Definition, depth) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// fragment is inOrder of the fragment def spread in typ, walked once.
func (w *walk) fragment(typ string, def *ast.FragmentDefinition, depth int) bool {
	key := [2]string{typ, def.Name}
	if answer, ok := w.fragments[key]; ok {
		return answer
	}
	if w.fragments == nil {
		w.fragments = map[[2]string]bool{}
	}
	w.fragments[key] = false
	answer := w.inOrder(typ, def.SelectionSet, depth+1)
	w.fragments[key] = answer
	return answer
}

// MarshalSlice marshals the n elements of a list of typ with selection sel
// by marshal: one after another when they may be, each with its own field
// context (its index) and its panic recovered into a null and an error, as
// gqlgen's graphql.MarshalSliceConcurrently does in its goroutines;
// otherwise, and for an empty list, with graphql.MarshalSliceConcurrently.
// They may be when the list is below another one marshaled in order, or
// when s.InOrderSettled says so with the list's parent value (the page
// holding it) as the Settler, if it is one. Everything below a list
// marshaled in order is marshaled in order, and ResolveConcurrently
// resolves its objects' concurrent fields at once.
func MarshalSlice(ctx context.Context, s Schema, typ string, sel ast.SelectionSet, n int, marshal func(ctx context.Context, i int) graphql.Marshaler) graphql.Array {
	if n == 0 || !inOrder(ctx, s, typ, sel) {
		return graphql.MarshalSliceConcurrently(ctx, n, 0, false, marshal)
	}
	ctx = context.WithValue(ctx, inOrderKey{}, true)
	ret := make(graphql.Array, n)
	// The elements' field contexts and indexes, allocated at once (two
	// allocations a list instead of two an element).
	fcs, index := make([]graphql.FieldContext, n), make([]int, n)
	for i := range n {
		index[i] = i
		fcs[i].Index = &index[i]
		ret[i] = marshalOne(graphql.WithFieldContext(ctx, &fcs[i]), i, marshal)
	}
	return ret
}

// inOrderKey marks the context of a list marshaled in order, and so of
// everything below it.
type inOrderKey struct{}

// inOrder reports whether the list of ctx's field may be marshaled in order.
func inOrder(ctx context.Context, s Schema, typ string, sel ast.SelectionSet) bool {
	if ctx.Value(inOrderKey{}) != nil {
		return true
	}
	var settled Settler
	if fc := graphql.GetFieldContext(ctx); fc != nil && fc.Parent != nil {
		settled, _ = fc.Parent.Result.(Settler)
	}
	return s.InOrderSettled(typ, sel, settled)
}

// ResolveConcurrently is out.ResolveConcurrently(oc, deferred, i,
// recoverFromPanic, nonNull, resolve), which gqlgen's object marshalers
// call for each concurrent field and run in goroutines of their own (all
// but the first) when the object is dispatched. Below a list MarshalSlice
// marshals in order, whose walk found every concurrent field below it
// settled and no @defer, it resolves the field at once instead, in the
// caller's goroutine, and counts its value against out.Invalids as
// Dispatch would: a null for a non-null field, a required null for another.
// A panic is the field's null and an error when recoverFromPanic, as in
// gqlgen.
func ResolveConcurrently(ctx context.Context, out *graphql.FieldSet, oc *graphql.OperationContext, deferred *graphql.DeferredGroup, i int, recoverFromPanic, nonNull bool, resolve func(context.Context) graphql.Marshaler) {
	if ctx.Value(inOrderKey{}) == nil {
		out.ResolveConcurrently(oc, deferred, i, recoverFromPanic, nonNull, resolve)
		return
	}
	v := resolveNow(ctx, oc, recoverFromPanic, resolve)
	out.Values[i] = v
	invalid := graphql.Marshaler(graphql.RequiredNull)
	if nonNull {
		invalid = graphql.Null
	}
	if v == invalid {
		atomic.AddUint32(&out.Invalids, 1)
	}
}

// resolveNow runs resolve, a panic reported through oc and resolved to a
// null when recoverFromPanic.
func resolveNow(ctx context.Context, oc *graphql.OperationContext, recoverFromPanic bool, resolve func(context.Context) graphql.Marshaler) (v graphql.Marshaler) {
	if recoverFromPanic {
		defer func() {
			if r := recover(); r != nil {
				oc.Error(ctx, oc.Recover(ctx, r))
				v = graphql.Null
			}
		}()
	}
	return resolve(ctx)
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

// NewDeferredGroup is graphql.NewDeferredGroup(ctx) for an object whose
// collected fields hold a deferred one (a field under @defer), and an empty
// group for any other: gqlgen's object marshalers make a group for every
// object, which reads the object's path into a new slice and makes a field
// set and a map (8% of the server's CPU and 19% of its allocations for a
// nested page of tasks), while an object without a deferred field only asks
// the group's Defers for its length (zero) and passes it to
// FieldSet.ResolveConcurrently, which uses it for deferred fields only.
// The generator rewrites gqlgen's calls into this one.
func NewDeferredGroup(ctx context.Context, fields []graphql.CollectedField) graphql.DeferredGroup {
	for i := range fields {
		if fields[i].IsDeferred() {
			return graphql.NewDeferredGroup(ctx)
		}
	}
	return graphql.DeferredGroup{}
}
