package resolvers

import (
	"context"
	"net/http"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/store"
)

// Loaders batches the reads of one request: every to-one and to-many hop of the
// schema goes through one of them, so a page of N items costs a constant number
// of queries, not N.
//
// A request's Loaders are one allocation: every loader is a field, set up
// by newLoaders. (They were a struct of pointers to loaders over closures:
// BenchmarkTaskByID went from 298 to 269 allocations a request.)
type Loaders struct {
	db *store.DB
	accountLoaders
	taskLoaders

	// authorsAsked remembers, per comments field of the document, whether
	// its selection asks for the comments' authors (commentPagesFor).
	authorsMu    sync.Mutex
	authorsAsked map[*ast.Field]bool
}

type loadersKey struct{}

// newLoaders returns fresh loaders for one request.
func newLoaders(db *store.DB) *Loaders {
	l := &Loaders{db: db}
	l.accountLoaders.init(l)
	l.taskLoaders.init(l)
	return l
}

// commentPagesFor returns the loader of the pages of comments of the
// Task.comments field of ctx: the one that reads the comments' authors with
// them when its selection asks for them (nodes { author } or
// edges { node { author } }), so that they need no read of their own.
func (l *Loaders) commentPagesFor(ctx context.Context) *loader[store.CommentPageKey, *store.CommentConnection] {
	fc := graphql.GetFieldContext(ctx)
	oc := graphql.GetOperationContext(ctx)
	if fc == nil || fc.Field.Field == nil || oc == nil {
		return &l.commentPages
	}
	l.authorsMu.Lock()
	defer l.authorsMu.Unlock()
	asked, ok := l.authorsAsked[fc.Field.Field]
	if !ok {
		asked = asksForAuthors(oc, fc.Field.Selections)
		if l.authorsAsked == nil {
			l.authorsAsked = map[*ast.Field]bool{}
		}
		l.authorsAsked[fc.Field.Field] = asked
	}
	if asked {
		return &l.commentPagesWithAuthors
	}
	return &l.commentPages
}

// asksForAuthors reports whether the selection of a CommentConnection asks
// for the author of its comments.
func asksForAuthors(oc *graphql.OperationContext, conn ast.SelectionSet) bool {
	commentAsks := func(sel ast.SelectionSet) bool {
		for _, f := range graphql.CollectFields(oc, sel, []string{"Comment"}) {
			if f.Name == "author" {
				return true
			}
		}
		return false
	}
	for _, f := range graphql.CollectFields(oc, conn, []string{"CommentConnection"}) {
		switch f.Name {
		case "nodes":
			if commentAsks(f.Selections) {
				return true
			}
		case "edges":
			for _, e := range graphql.CollectFields(oc, f.Selections, []string{"CommentEdge"}) {
				if e.Name == "node" && commentAsks(e.Selections) {
					return true
				}
			}
		}
	}
	return false
}

// LoaderMiddleware gives each request its own loaders.
func LoaderMiddleware(db *store.DB, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), loadersKey{}, newLoaders(db))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// WithLoaders returns ctx with fresh loaders: each event of a subscription
// reads the things it names as they are then, not as an earlier event of the
// same connection cached them.
func WithLoaders(ctx context.Context, db *store.DB) context.Context {
	return context.WithValue(ctx, loadersKey{}, newLoaders(db))
}

// loaders returns the request's loaders (fresh ones outside a request, as in
// direct resolver calls).
func (r *Resolver) loaders(ctx context.Context) *Loaders {
	if l, ok := ctx.Value(loadersKey{}).(*Loaders); ok {
		return l
	}
	return newLoaders(r.DB)
}
