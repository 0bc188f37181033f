package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vikstrous/dataloadgen"

	"taskflow/store"
)

// taskLoaders batch the reads of tasks and comments.
type taskLoaders struct {
	// taskByID loads tasks by id (nil for none), with no access check.
	taskByID *dataloadgen.Loader[string, *store.Task]
	// taskPages loads pages of projects' tasks: one query for every page asked
	// for in the same tick, whatever their projects, filters, sizes and cursors.
	taskPages *dataloadgen.Loader[store.TaskPageKey, *store.TaskConnection]
	// commentPages loads pages of tasks' comments, batched like taskPages.
	commentPages *dataloadgen.Loader[store.CommentPageKey, *store.CommentConnection]
	// taskUserByID loads the users tasks and comments refer to (creators,
	// assignees, authors). Stand-in until the account loaders exist.
	taskUserByID *dataloadgen.Loader[string, *store.User]
	// taskProjectByID loads the projects of tasks. Stand-in until the account
	// loaders exist.
	taskProjectByID *dataloadgen.Loader[string, *store.Project]
}

// newTaskLoaders returns the task and comment loaders of one request.
func newTaskLoaders(db *store.DB) taskLoaders {
	return taskLoaders{
		taskByID:        dataloadgen.NewLoader(batch(db.TasksByID)),
		taskPages:       dataloadgen.NewLoader(batch(db.TaskPages)),
		commentPages:    dataloadgen.NewLoader(batch(db.CommentPages)),
		taskUserByID:    dataloadgen.NewLoader(batch(db.UsersForTasks)),
		taskProjectByID: dataloadgen.NewLoader(batch(db.ProjectsForTasks)),
	}
}

// batch adapts a store function answering keys in order into a loader fetch
// function; an error fails every key of the batch.
func batch[K comparable, V any](fetch func(ctx context.Context, keys []K) ([]V, error)) func(context.Context, []K) ([]V, []error) {
	return func(ctx context.Context, keys []K) ([]V, []error) {
		vs, err := fetch(ctx, keys)
		if err != nil {
			return nil, []error{err}
		}
		return vs, nil
	}
}

// loadUser loads a user a task or comment refers to; a missing one is NOT_FOUND.
func (r *Resolver) loadUser(ctx context.Context, id string) (*store.User, error) {
	u, err := r.loaders(ctx).taskUserByID.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, store.Errorf(store.CodeNotFound, "user not found")
	}
	return u, nil
}

// optional converts a gqlgen input field that may be absent or null into the
// store's Optional.
func optional[T any](o graphql.Omittable[*T]) store.Optional[T] {
	return store.Optional[T]{Set: o.IsSet(), Value: o.Value()}
}
