package querydoc

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2/ast"
)

// weightShapes are documents of the shapes whose parsed form costs the most
// heap per node (fields, and __typename, for which the validator allocates a
// definition), and of typical ones; k makes each text distinct.
var weightShapes = map[string]func(k int) string{
	"typename": func(k int) string { return fmt.Sprintf("#%d\n{%s }", k, strings.Repeat(" __typename", 2000)) },
	"aliases": func(k int) string {
		var b strings.Builder
		for i := range 2000 {
			fmt.Fprintf(&b, " a%d: __typename", i)
		}
		return fmt.Sprintf("#%d\n{%s }", k, b.String())
	},
	"comments": func(k int) string { return fmt.Sprintf("#%d\n{%s }", k, strings.Repeat(" __typename # c\n", 2000)) },
	"arguments": func(k int) string {
		var b strings.Builder
		for i := range 600 {
			fmt.Fprintf(&b, ` a%d: task(id: "%d") { id }`, i, i)
		}
		return fmt.Sprintf("#%d\n{%s }", k, b.String())
	},
	"introspection": func(k int) string { return fmt.Sprintf("#%d\n%s", k, introspection.Query) },
}

// TestWeightBoundsTheHeap checks that Weight is at least the heap that
// validated documents of each shape hold (their text included), and at most
// four times it: the cache's bound in bytes is an honest one. It measures
// the live heap, so it does not run in parallel with other tests.
func TestWeightBoundsTheHeap(t *testing.T) { //nolint:paralleltest // measures the heap
	v := NewValidator(taskflowSchema, Limits{Tokens: 100000})
	for name, gen := range weightShapes {
		const n = 40
		keep := make([]*ast.QueryDocument, 0, n)
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		var weight int64
		for k := range n {
			q := gen(k)
			doc, shape, errs := v.Prepare(q)
			if errs != nil {
				t.Fatalf("%s: %v", name, errs)
			}
			keep = append(keep, doc)
			weight += Weight(q, shape)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		held := int64(ms.HeapAlloc) - int64(before)
		runtime.KeepAlive(keep)
		t.Logf("%s: weight %d, heap %d (%.2f)", name, weight, held, float64(weight)/float64(held))
		if weight < held || weight > 4*held {
			t.Errorf("%s: weight %d for a heap of %d bytes", name, weight, held)
		}
	}
}

// TestCacheIsBoundedByWeight fills a small cache with many documents and
// checks that what it keeps never weighs more than its bound.
func TestCacheIsBoundedByWeight(t *testing.T) {
	t.Parallel()
	const maxBytes = 1 << 20
	c := NewCache(maxBytes)
	v := NewValidator(taskflowSchema, DefaultLimits)
	for k := range 300 {
		q := fmt.Sprintf("#%d\n{%s }", k, strings.Repeat(" __typename", 100+k))
		doc, shape, errs := v.Prepare(q)
		if errs != nil {
			t.Fatal(errs)
		}
		c.Add(q, doc, shape)
		if c.WeightedSize() > maxBytes {
			t.Fatalf("after %d documents the cache weighs %d", k+1, c.WeightedSize())
		}
	}
	if c.WeightedSize() < maxBytes/2 {
		t.Fatalf("the cache weighs %d: it keeps too little to be useful", c.WeightedSize())
	}
	// A document heavier than the whole cache is not kept.
	q := "{" + strings.Repeat(" __typename", 3000) + " }"
	doc, shape, _ := v.Prepare(q)
	c.Add(q, doc, shape)
	if _, _, ok := c.Get(q); ok {
		t.Fatal("a document heavier than the cache was kept")
	}
}
