package httpapi

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/auth"
	"taskflow/resolvers"
	"taskflow/store"
)

// changesCursorExtension reads the spine head (store.DB.SpineHead) for a
// signed-in caller's query that selects changesCursor at its root, before any
// field of the operation resolves, and hands it to the field's resolver
// (resolvers.WithChangesCursor).
//
// Why that order makes the recipe "query changesCursor with your data, then
// subscribe with after: it" gap-free: the head is the xmin of its
// statement's snapshot (pg_snapshot_xmin), less one: every transaction with a
// smaller id had ended when it was taken. The operation's fields read after
// it, in statements that start once the head's has returned, so each of
// their snapshots is later. A change one of those snapshots does not show had
// not committed when it was taken, so it had not when the head was taken
// either: its transaction's id is at or past the head's xmin (one that had no
// id yet gets a larger one), and so are the spine events it commits with the
// change. A subscription from the cursor reads every event past it (catch-up,
// then live), so it delivers that change. It may also deliver changes the
// data already shows (committed after the head's snapshot, or by a
// transaction still open then): items carry the thing as it is now, so
// applying them again is harmless.
//
// gqlgen resolves root fields concurrently: a head read by the resolver could
// come after the other fields' statements, and a change committed in between
// would be in neither the data nor the stream. Subscribing first does not
// help either: the server takes a subscription's start when it processes the
// subscribe message, which may be after a query sent later.
//
// The read is one plain statement on the pool, outside any transaction and
// with no session state, so it holds behind PgBouncer in transaction mode (a
// snapshot's xmin is the whole cluster's, whatever the connection). An
// operation that does not select the field, an anonymous caller's (the field
// is UNAUTHENTICATED), a mutation and a subscription read nothing.
type changesCursorExtension struct{ db *store.DB }

var (
	_ graphql.HandlerExtension     = changesCursorExtension{}
	_ graphql.OperationInterceptor = changesCursorExtension{}
)

// ExtensionName names the extension.
func (changesCursorExtension) ExtensionName() string { return "ChangesCursor" }

// Validate accepts any schema.
func (changesCursorExtension) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation reads the head before the operation runs when it
// selects changesCursor; an error of the read is the field's.
func (e changesCursorExtension) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	if auth.UserFrom(ctx) == nil || !selectsChangesCursor(ctx) {
		return next(ctx)
	}
	head, err := e.db.SpineHead(ctx)
	return next(resolvers.WithChangesCursor(ctx, head, err))
}

// queryType is what the root fields of a query satisfy (as gqlgen collects
// them, so that the executor reuses the collection).
var queryType = []string{"Query"}

// selectsChangesCursor reports whether the operation of ctx is a query that
// resolves changesCursor at its root: under any alias, in fragments, not
// skipped by @skip or @include.
func selectsChangesCursor(ctx context.Context) bool {
	if !graphql.HasOperationContext(ctx) {
		return false
	}
	rc := graphql.GetOperationContext(ctx)
	if rc.Operation == nil || rc.Operation.Operation != ast.Query {
		return false
	}
	for _, f := range graphql.CollectFields(rc, rc.Operation.SelectionSet, queryType) {
		if f.Name == "changesCursor" {
			return true
		}
	}
	return false
}
