package resolvers

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// newLoader returns a loader of no request's Loaders over fetch, that waits at
// most wait for a batch.
func newLoader[K comparable, V any](fetch func(context.Context, []K) ([]V, []error), wait time.Duration) *loader[K, V] {
	l := &loader[K, V]{}
	l.init(nil, func(_ *Loaders, ctx context.Context, keys []K) ([]V, []error) { return fetch(ctx, keys) }, wait)
	return l
}

// fetchLog is a loader fetch that answers "v"+key and records each call.
type fetchLog struct {
	mu    sync.Mutex
	calls [][]string
}

func (f *fetchLog) fetch(_ context.Context, keys []string) ([]string, []error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(keys))
	f.mu.Unlock()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "v" + k
	}
	return out, nil
}

func (f *fetchLog) took() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// field returns ctx under a field named alias. Like gqlgen, it gives every
// element of a list the same document node for a field.
func field(ctx context.Context, alias string) context.Context {
	f, _ := docFields.LoadOrStore(alias, &ast.Field{Alias: alias})
	return graphql.WithFieldContext(ctx, &graphql.FieldContext{Field: graphql.CollectedField{Field: f.(*ast.Field)}})
}

// docFields are the document nodes of the fields of these tests, by alias.
var docFields sync.Map

// list returns the contexts of the n elements of a list field named alias
// under ctx.
func list(ctx context.Context, alias string, n int) []context.Context {
	fc := &graphql.FieldContext{Field: graphql.CollectedField{Field: &ast.Field{Alias: alias}}, Result: make([]int, n)}
	ctx = graphql.WithFieldContext(ctx, fc)
	out := make([]context.Context, n)
	for i := range out {
		out[i] = graphql.WithFieldContext(ctx, &graphql.FieldContext{Index: &i})
	}
	return out
}

// loadAll loads keys[i] in elements[i], all at once, and returns the values.
func loadAll(t *testing.T, l *loader[string, string], elements []context.Context, keys []string) []string {
	t.Helper()
	var wg sync.WaitGroup
	got := make([]string, len(keys))
	for i, k := range keys {
		wg.Go(func() {
			v, err := l.Load(field(elements[i], "assignee"), k)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	wg.Wait()
	return got
}

// A field outside any list is fetched at once, and the elements of one list
// as soon as they have all asked: neither waits the loader's hour.
func TestLoaderFetchesWithoutWaiting(t *testing.T) {
	t.Parallel()
	var f fetchLog
	l := newLoader(f.fetch, time.Hour)
	root := field(t.Context(), "task")
	if v, err := l.Load(field(root, "assignee"), "a"); err != nil || v != "va" {
		t.Fatalf("outside a list: %q %v", v, err)
	}
	if c := f.took(); len(c) != 1 || !slices.Equal(c[0], []string{"a"}) {
		t.Fatalf("fetches %q, want [[a]]", c)
	}
	page := list(field(root, "tasks"), "nodes", 4)
	if got := loadAll(t, l, page, []string{"b", "c", "b", "d"}); !slices.Equal(got, []string{"vb", "vc", "vb", "vd"}) {
		t.Fatalf("values %q", got)
	}
	c := f.took()
	if len(c) != 1 || len(c[0]) != 3 {
		t.Fatalf("fetches %q, want one of b, c and d", c)
	}
	// The elements' keys are cached: under nested lists (dataloadgen's window)
	// they are not fetched again.
	nested := list(page[0], "comments", 2)
	if got := loadAll(t, l, nested, []string{"c", "d"}); !slices.Equal(got, []string{"vc", "vd"}) {
		t.Fatalf("nested: %q", got)
	}
	if c := f.took(); len(c) != 0 {
		t.Fatalf("cached keys fetched again: %q", c)
	}
}

// When an element of a list does not ask (a task with no assignee), the others
// are fetched together once the loader's wait is over.
func TestLoaderWaitsForElementsThatDoNotAsk(t *testing.T) {
	t.Parallel()
	var f fetchLog
	l := newLoader(f.fetch, 200*time.Millisecond)
	page := list(field(t.Context(), "tasks"), "nodes", 3)
	if got := loadAll(t, l, page[:2], []string{"a", "b"}); !slices.Equal(got, []string{"va", "vb"}) {
		t.Fatalf("values %q", got)
	}
	if c := f.took(); len(c) != 1 || len(c[0]) != 2 {
		t.Fatalf("fetches %q, want a and b in one", c)
	}
}

// A primed key is served without a fetch whichever way it is asked for; Clear
// and ClearAll make the next ask fetch again.
func TestLoaderPrimeAndClear(t *testing.T) {
	t.Parallel()
	var f fetchLog
	l := newLoader(f.fetch, time.Hour)
	root := field(t.Context(), "me")
	if !l.Prime("a", "primed") || l.Prime("a", "again") {
		t.Fatal("Prime: first must cache, second must not")
	}
	if v, _ := l.Load(field(root, "user"), "a"); v != "primed" {
		t.Fatalf("outside a list: %q", v)
	}
	page := list(root, "nodes", 2)
	if got := loadAll(t, l, page, []string{"a", "a"}); !slices.Equal(got, []string{"primed", "primed"}) {
		t.Fatalf("in a list: %q", got)
	}
	nested := list(page[0], "comments", 1)
	if got := loadAll(t, l, nested, []string{"a"}); got[0] != "primed" {
		t.Fatalf("nested: %q", got)
	}
	if c := f.took(); len(c) != 0 {
		t.Fatalf("a primed key was fetched: %q", c)
	}
	l.Clear("a")
	if v, _ := l.Load(field(root, "user"), "a"); v != "va" {
		t.Fatalf("after Clear: %q", v)
	}
	l.ClearAll()
	if got := loadAll(t, l, page, []string{"a", "b"}); !slices.Equal(got, []string{"va", "vb"}) {
		t.Fatalf("after ClearAll: %q", got)
	}
	if c := f.took(); len(c) != 2 || !slices.Equal(c[0], []string{"a"}) || len(c[1]) != 2 {
		t.Fatalf("fetches %q, want [a] then [a b]", c)
	}
}

// An element that asks for nothing says so (Skip): the others' keys go at
// once instead of after the wait (an hour here).
func TestLoaderSkip(t *testing.T) {
	t.Parallel()
	var f fetchLog
	l := newLoader(f.fetch, time.Hour)
	page := list(field(t.Context(), "tasks"), "nodes", 3)
	l.Skip(field(page[1], "assignee"))
	if got := loadAll(t, l, []context.Context{page[0], page[2]}, []string{"a", "b"}); !slices.Equal(got, []string{"va", "vb"}) {
		t.Fatalf("values %q", got)
	}
	if c := f.took(); len(c) != 1 || len(c[0]) != 2 {
		t.Fatalf("fetches %q, want a and b in one", c)
	}
	// Outside a list Skip does nothing.
	l.Skip(field(t.Context(), "assignee"))
}

// A key fetched for nested lists is not fetched again outside them.
func TestLoaderRemembersNestedFetches(t *testing.T) {
	t.Parallel()
	var f fetchLog
	l := newLoader(f.fetch, 10*time.Millisecond)
	page := list(field(t.Context(), "tasks"), "nodes", 1)
	nested := list(page[0], "comments", 1)
	if got := loadAll(t, l, nested, []string{"a"}); got[0] != "va" {
		t.Fatalf("nested: %q", got)
	}
	if v, err := l.Load(field(t.Context(), "user"), "a"); err != nil || v != "va" {
		t.Fatalf("outside a list: %q %v", v, err)
	}
	if c := f.took(); len(c) != 1 {
		t.Fatalf("fetches %q, want one", c)
	}
}

// loadersSink keeps newLoaders' result on the heap in
// TestNewLoadersIsOneAllocation.
var loadersSink *Loaders

// A request's loaders cost one allocation, however many kinds there are: a
// loader added over a closure, or as a pointer, fails this.
func TestNewLoadersIsOneAllocation(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { loadersSink = newLoaders(nil) }); n != 1 {
		t.Fatalf("newLoaders: %v allocations, want 1", n)
	}
}
