package resolvers

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vikstrous/dataloadgen"
)

// loader batches and caches the reads of one kind of thing for one request,
// and waits only as long as batching needs:
//
//   - A field resolved outside any list (task(id) { assignee },
//     project(id) { tasks }) is the only one asking at that moment: its key is
//     fetched at once.
//   - A field resolved for each element of one list (the comments of each task
//     of a page) is asked for once per element: the keys are fetched together
//     as soon as every element has asked, or once the loader's wait is over
//     when some element does not ask (a task with no assignee).
//   - Under nested lists (the authors of the comments of each task) the keys
//     come from several lists at once: they go through dataloadgen's window,
//     which gathers them into one batch.
//
// Every key fetched or primed is cached for the rest of the request, until
// Clear or ClearAll.
//
// A request's loaders are fields of its Loaders, made in one allocation
// (newLoaders): fetch is a function of the package, not a closure, and gets
// the Loaders it serves (owner).
type loader[K comparable, V any] struct {
	fetch func(owner *Loaders, ctx context.Context, keys []K) ([]V, []error)
	owner *Loaders
	wait  time.Duration

	// A request makes a loader of every kind and uses few of them: the maps
	// and the dataloadgen loader are made when first needed.
	mu      sync.Mutex
	batched *dataloadgen.Loader[K, V]       // nil until the first ask under nested lists
	lists   map[siblingsKey]*siblings[K, V] // nil until the first ask in a list
	known   map[K]entry[K, V]               // keys fetched, being fetched or primed outside dataloadgen; nil for none
}

// init sets l up as a loader of owner over fetch, which answers keys in order
// (one error for all of them, or one per key), that waits at most wait for a
// batch.
func (l *loader[K, V]) init(owner *Loaders, fetch func(*Loaders, context.Context, []K) ([]V, []error), wait time.Duration) {
	l.owner, l.fetch, l.wait = owner, fetch, wait
}

// learn records what the loader knows of key. l.mu is held.
func (l *loader[K, V]) learn(key K, e entry[K, V]) {
	if l.known == nil {
		l.known = map[K]entry[K, V]{}
	}
	l.known[key] = e
}

// entry is what the loader knows of a key: the group that fetches it, or,
// when group is nil, its value (primed, or fetched for nested lists). A known
// value costs no group, channel or map of its own.
type entry[K comparable, V any] struct {
	group *fetchGroup[K, V]
	value V
}

// get returns the key's value, waiting for its group if it has one.
func (e entry[K, V]) get(key K) (V, error) {
	if e.group == nil {
		return e.value, nil
	}
	return e.group.get(key)
}

// fetchGroup is keys fetched together; done is closed once out holds them.
type fetchGroup[K comparable, V any] struct {
	ctx        context.Context // the first asker's
	keys       []K
	dispatched bool
	done       chan struct{}
	out        map[K]result[V]
}

// result is a key's value or error.
type result[V any] struct {
	v   V
	err error
}

func newFetchGroup[K comparable, V any](ctx context.Context) *fetchGroup[K, V] {
	return &fetchGroup[K, V]{ctx: ctx, done: make(chan struct{})}
}

// get waits for g and returns key's result.
func (g *fetchGroup[K, V]) get(key K) (V, error) {
	<-g.done
	r := g.out[key]
	return r.v, r.err
}

// siblingsKey names the field asked for under every element of one list: the
// list's field, and the document's node of the field asking (the same for
// every element).
type siblingsKey struct {
	list  *graphql.FieldContext
	field *ast.Field
}

// siblings counts the elements of one list that have asked; group holds the
// keys they asked for that were not known yet.
type siblings[K comparable, V any] struct {
	want, arrived int
	group         *fetchGroup[K, V]
	timer         *time.Timer
}

// Load returns the value of key, fetched as the type's comment says.
func (l *loader[K, V]) Load(ctx context.Context, key K) (V, error) {
	fc := graphql.GetFieldContext(ctx)
	el, nested := listElement(fc)
	if el != nil && !nested {
		if list := reflect.ValueOf(el.Parent.Result); list.Kind() == reflect.Slice && list.Len() <= loaderMaxBatch {
			return l.loadSibling(ctx, siblingsKey{list: el.Parent, field: fc.Field.Field}, list.Len(), key)
		}
	}
	l.mu.Lock()
	if e, ok := l.known[key]; ok {
		l.mu.Unlock()
		return e.get(key)
	}
	if el != nil { // under nested lists
		if l.batched == nil {
			fetch := func(ctx context.Context, keys []K) ([]V, []error) { return l.fetch(l.owner, ctx, keys) }
			l.batched = dataloadgen.NewLoader(fetch, dataloadgen.WithWait(l.wait), dataloadgen.WithBatchCapacity(loaderMaxBatch))
		}
		batched := l.batched
		l.mu.Unlock()
		v, err := batched.Load(ctx, key)
		if err == nil {
			l.Prime(key, v)
		}
		return v, err
	}
	g := newFetchGroup[K, V](ctx)
	g.keys, g.dispatched = []K{key}, true
	l.learn(key, entry[K, V]{group: g})
	l.mu.Unlock()
	l.run(g)
	return g.get(key)
}

// Skip tells the loader that the field of ctx asks for no key this time (a
// task without assignee), so that, in a list, the other elements' keys need
// not wait for it.
func (l *loader[K, V]) Skip(ctx context.Context) {
	fc := graphql.GetFieldContext(ctx)
	el, nested := listElement(fc)
	if el == nil || nested {
		return
	}
	if list := reflect.ValueOf(el.Parent.Result); list.Kind() == reflect.Slice && list.Len() <= loaderMaxBatch {
		l.arrive(ctx, siblingsKey{list: el.Parent, field: fc.Field.Field}, list.Len(), nil)
	}
}

// loadSibling is Load for the element of a list of want elements.
func (l *loader[K, V]) loadSibling(ctx context.Context, k siblingsKey, want int, key K) (V, error) {
	return l.arrive(ctx, k, want, &key).get(key)
}

// arrive counts an element of a list of want elements as having asked, for
// key (nil: for nothing), and returns what the loader knows of key: its value,
// or the group that fetches it. The group of the list's keys goes once every
// element has asked, or after the wait.
func (l *loader[K, V]) arrive(ctx context.Context, k siblingsKey, want int, key *K) entry[K, V] {
	l.mu.Lock()
	s := l.lists[k]
	if s == nil {
		s = &siblings[K, V]{want: want, group: newFetchGroup[K, V](ctx)}
		if l.lists == nil {
			l.lists = map[siblingsKey]*siblings[K, V]{}
		}
		l.lists[k] = s
		s.timer = time.AfterFunc(l.wait, func() { l.dispatch(k, s) })
	}
	s.arrived++
	var e entry[K, V]
	if key != nil {
		var ok bool
		if e, ok = l.known[*key]; !ok {
			e.group = s.group
			e.group.keys = append(e.group.keys, *key)
			l.learn(*key, e)
		}
	}
	full := s.arrived >= s.want
	l.mu.Unlock()
	if full {
		s.timer.Stop()
		l.dispatch(k, s)
	}
	return e
}

// dispatch fetches the keys of s's group, unless that was done already.
func (l *loader[K, V]) dispatch(k siblingsKey, s *siblings[K, V]) {
	l.mu.Lock()
	if l.lists[k] == s {
		delete(l.lists, k)
	}
	g := s.group
	if g.dispatched {
		l.mu.Unlock()
		return
	}
	g.dispatched = true
	l.mu.Unlock()
	l.run(g)
}

// run fetches g's keys and wakes the waiters. It does not prime dataloadgen's
// cache with them: they are in known, where every ask looks first. Nothing
// adds to g's keys once it is dispatched.
func (l *loader[K, V]) run(g *fetchGroup[K, V]) {
	defer close(g.done)
	g.out = make(map[K]result[V], len(g.keys))
	if len(g.keys) == 0 {
		return
	}
	vs, errs := l.safeFetch(g.ctx, g.keys)
	for j, k := range g.keys {
		var r result[V]
		switch {
		case len(errs) == 1 && errs[0] != nil:
			r.err = errs[0]
		case j < len(errs) && errs[j] != nil:
			r.err = errs[j]
		case len(vs) != len(g.keys):
			r.err = fmt.Errorf("loader: %d values fetched for %d keys", len(vs), len(g.keys))
		default:
			r.v = vs[j]
		}
		g.out[k] = r
	}
}

// safeFetch is fetch that turns a panic into an error for every key.
func (l *loader[K, V]) safeFetch(ctx context.Context, keys []K) (vs []V, errs []error) {
	defer func() {
		if p := recover(); p != nil {
			vs, errs = nil, []error{fmt.Errorf("loader: panic: %v", p)}
		}
	}()
	return l.fetch(l.owner, ctx, keys)
}

// Prime caches value for key unless key is cached already, and reports
// whether it did. It caches it outside dataloadgen only: every ask looks
// there first, under nested lists too.
func (l *loader[K, V]) Prime(key K, value V) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.known[key]; ok {
		return false
	}
	l.learn(key, entry[K, V]{value: value})
	return true
}

// Clear forgets key.
func (l *loader[K, V]) Clear(key K) {
	l.mu.Lock()
	delete(l.known, key)
	batched := l.batched
	l.mu.Unlock()
	if batched != nil {
		batched.Clear(key)
	}
}

// ClearAll forgets every key.
func (l *loader[K, V]) ClearAll() {
	l.mu.Lock()
	l.known = nil
	batched := l.batched
	l.mu.Unlock()
	if batched != nil {
		batched.ClearAll()
	}
}

// listElement returns the nearest list element above fc (nil when fc is
// resolved outside any list, or has no parent list field), and whether
// another list element is further up.
func listElement(fc *graphql.FieldContext) (el *graphql.FieldContext, nested bool) {
	for f := fc; f != nil; f = f.Parent {
		if f.Index == nil {
			continue
		}
		if el != nil {
			return el, true
		}
		el = f
	}
	if el == nil || el.Parent == nil {
		return nil, false
	}
	return el, false
}
