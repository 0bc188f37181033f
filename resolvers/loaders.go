package resolvers

import (
	"context"
	"net/http"

	"taskflow/store"
)

// Loaders batches the reads of one request: every to-one and to-many hop of the
// schema goes through one of them, so a page of N items costs a constant number
// of queries, not N.
type Loaders struct {
	*accountLoaders
	taskLoaders
}

type loadersKey struct{}

// newLoaders returns fresh loaders for one request.
func newLoaders(db *store.DB) *Loaders {
	return &Loaders{
		accountLoaders: newAccountLoaders(db),
		taskLoaders:    newTaskLoaders(db),
	}
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
