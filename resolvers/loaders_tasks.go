package resolvers

import "taskflow/store"

// taskLoaders batch the reads of tasks and comments.
type taskLoaders struct{}

func newTaskLoaders(db *store.DB) taskLoaders { return taskLoaders{} }
