package resolvers

import (
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vikstrous/dataloadgen"
)

// loader is a dataloadgen loader that waits only where batching can gather
// something. Siblings in a list (the assignees of a page of tasks) ask for
// their keys within microseconds of each other, through the loader, which
// fetches them together after its wait. A field resolved outside any list
// (task(id) { assignee }, project(id) { tasks }) is the only one asking at that
// moment: its key is fetched at once, saving the wait, and cached for the rest
// of the request.
type loader[K comparable, V any] struct {
	*dataloadgen.Loader[K, V]
	fetch func(context.Context, []K) ([]V, []error)
}

// newLoader returns a loader over fetch, which answers keys in order (one
// error for all of them, or one per key), with dataloadgen's options.
func newLoader[K comparable, V any](fetch func(context.Context, []K) ([]V, []error), opts ...dataloadgen.Option) *loader[K, V] {
	return &loader[K, V]{Loader: dataloadgen.NewLoader(fetch, opts...), fetch: fetch}
}

// Load returns the value of key: batched with its siblings' keys when the field
// of ctx is resolved for an element of a list, fetched at once otherwise.
func (l *loader[K, V]) Load(ctx context.Context, key K) (V, error) {
	if inList(ctx) {
		return l.Loader.Load(ctx, key)
	}
	var v V
	vs, errs := l.fetch(ctx, []K{key})
	if len(errs) > 0 && errs[0] != nil {
		return v, errs[0]
	}
	if len(vs) != 1 {
		return v, fmt.Errorf("loader: %d values fetched for one key", len(vs))
	}
	l.Loader.Prime(key, vs[0])
	return vs[0], nil
}

// inList reports whether the field of ctx is resolved for an element of a list,
// at any depth.
func inList(ctx context.Context) bool {
	for fc := graphql.GetFieldContext(ctx); fc != nil; fc = fc.Parent {
		if fc.Index != nil {
			return true
		}
	}
	return false
}
