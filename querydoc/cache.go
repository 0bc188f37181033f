package querydoc

import (
	"math"

	"github.com/maypok86/otter/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// DefaultCacheBytes is the weight of validated documents a Cache keeps by
// default: about 500 documents of a typical application query (30 KB
// parsed), and a bounded part of the heap whatever is sent.
const DefaultCacheBytes = 16 << 20

// Weight estimates the bytes a validated document takes in memory: its
// source (the document's names and strings point into it, and the cache key
// is the same string), plus bytesPerNode for each node of shape.Nodes, plus
// the cache's own entry. bytesPerNode is the largest heap cost per node
// measured over the shapes of TestWeightBoundsTheHeap (a field, with its
// Position, its place in its parent's selection set, and what the validator
// adds, such as __typename's definition), rounded up.
func Weight(query string, shape Shape) int64 {
	return int64(len(query)) + int64(shape.Nodes)*bytesPerNode + entryBytes
}

const (
	bytesPerNode = 512
	entryBytes   = 256
)

// Cache keeps validated documents by their query text, bounded by the sum of
// their Weight. It is otter's W-TinyLFU cache: a burst of documents sent
// once (what an attacker sends) does not push out the documents clients use
// again and again. It is safe for concurrent use.
type Cache struct {
	c *otter.Cache[string, cached]
}

type cached struct {
	doc    *ast.QueryDocument
	shape  Shape
	uses   *deprecatedUses
	secret bool // SecretIn
	weight uint32
}

// NewCache returns a Cache of at most maxBytes (zero: DefaultCacheBytes).
func NewCache(maxBytes int64) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	return &Cache{c: otter.Must(&otter.Options[string, cached]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(_ string, v cached) uint32 { return v.weight },
		// Evictions run in the Add that makes them due (otter defers them to
		// a goroutine by default): the bound holds when Add returns, however
		// fast documents arrive.
		Executor: func(evict func()) { evict() },
	})}
}

// Get returns the validated document of query and its shape.
func (c *Cache) Get(query string) (*ast.QueryDocument, Shape, bool) {
	v, ok := c.c.GetIfPresent(query)
	return v.doc, v.shape, ok
}

// get returns what add kept for query.
func (c *Cache) get(query string) (cached, bool) { return c.c.GetIfPresent(query) }

// Add keeps doc, the validated document of query of the given shape, with
// whether it writes a secret (SecretIn). A document heavier than the whole
// cache is not kept.
func (c *Cache) Add(query string, doc *ast.QueryDocument, shape Shape) {
	c.add(query, cached{doc: doc, shape: shape, secret: SecretIn(doc)})
}

// add keeps v, the validated document of query with what was found in it,
// as Add does.
func (c *Cache) add(query string, v cached) {
	w := Weight(query, v.shape)
	if w > int64(c.c.GetMaximum()) || w > math.MaxUint32 {
		return
	}
	v.weight = uint32(w)
	c.c.Set(query, v)
}

// WeightedSize is the sum of the weights of the documents kept.
func (c *Cache) WeightedSize() int64 { return int64(c.c.WeightedSize()) }
