// Package resolvers implements the GraphQL resolvers: thin adapters from the schema
// to the store's domain operations.
package resolvers

import (
	"taskflow/auth"
	"taskflow/store"
)

// Resolver is the root resolver; it holds the dependencies resolvers share.
type Resolver struct {
	DB *store.DB
	// Hasher makes and verifies password hashes under the process's bound on
	// concurrent hashes (nil: auth.DefaultHasher).
	Hasher *auth.Hasher
}
