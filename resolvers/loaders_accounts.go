package resolvers

import "taskflow/store"

// accountLoaders batch the reads of users, workspaces, members and projects.
type accountLoaders struct{}

func newAccountLoaders(db *store.DB) accountLoaders { return accountLoaders{} }
