package resolvers

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vikstrous/dataloadgen"
)

// A field outside any list is fetched at once (the loader's wait is an hour
// here) and cached; siblings in a list are fetched together, in one batch.
func TestLoaderWaitsOnlyInLists(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls [][]string
	l := newLoader(func(_ context.Context, keys []string) ([]string, []error) {
		mu.Lock()
		calls = append(calls, slices.Clone(keys))
		mu.Unlock()
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = "v" + k
		}
		return out, nil
	}, dataloadgen.WithWait(time.Hour), dataloadgen.WithBatchCapacity(2))

	root := graphql.WithFieldContext(t.Context(), &graphql.FieldContext{Object: "Query", Field: graphql.CollectedField{}})
	hop := graphql.WithFieldContext(root, &graphql.FieldContext{Object: "Task"})
	if v, err := l.Load(hop, "a"); err != nil || v != "va" {
		t.Fatalf("outside a list: %q %v", v, err)
	}
	element := func(i int) context.Context {
		el := graphql.WithFieldContext(root, &graphql.FieldContext{Index: &i})
		return graphql.WithFieldContext(el, &graphql.FieldContext{Object: "Task"})
	}
	// In a list: "a" comes from the cache; "b" and "c" are fetched together
	// (the batch is full at two keys, so nobody waits the hour).
	var wg sync.WaitGroup
	got := make([]string, 3)
	for i, k := range []string{"a", "b", "c"} {
		wg.Go(func() {
			v, err := l.Load(element(i), k)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	wg.Wait()
	if !slices.Equal(got, []string{"va", "vb", "vc"}) {
		t.Fatalf("values %q", got)
	}
	if len(calls) != 2 || !slices.Equal(calls[0], []string{"a"}) || len(calls[1]) != 2 {
		t.Fatalf("fetches %q, want [a] then [b c] in one batch", calls)
	}
}
