package resolvers

import (
	"context"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"taskflow/errs"
	"taskflow/store"
)

// taskLoaders batch the reads of tasks, comments and attachments. Users and projects that
// tasks and comments refer to go through the account loaders.
type taskLoaders struct {
	// taskByID loads tasks by id (nil for none), with no access check: it serves
	// hops from things the viewer already sees (a comment's task).
	taskByID loader[string, *store.Task]
	// taskPages loads pages of projects' tasks: one query for every page asked
	// for in the same tick, whatever their projects, filters, sizes and cursors.
	taskPages loader[store.TaskPageKey, *store.TaskConnection]
	// commentPages loads pages of tasks' comments, batched like taskPages.
	commentPages loader[store.CommentPageKey, *store.CommentConnection]
	// commentPagesWithAuthors is commentPages for comments whose authors are
	// asked for too: it reads the authors with the pages and primes the user
	// loader with them (see Loaders.commentPagesFor).
	commentPagesWithAuthors loader[store.CommentPageKey, *store.CommentConnection]
	// attachmentPages loads pages of tasks' attachments, batched like taskPages.
	attachmentPages loader[store.AttachmentPageKey, *store.AttachmentConnection]
}

// pageLoaderWait is the longest the page loaders gather keys. A to-many hop
// under a list (the comments of each of 100 tasks) is asked for from as many
// goroutines, which can take longer than loaderWait to all start on a busy
// machine; a wider window keeps them in one query. When every element of the
// list asks, the batch goes as soon as the last one has (see loader).
const pageLoaderWait = 10 * time.Millisecond

// init sets up the task and comment loaders of owner's request.
func (l *taskLoaders) init(owner *Loaders) {
	l.taskByID.init(owner, fetchTasksByID, loaderWait)
	l.taskPages.init(owner, fetchTaskPages, pageLoaderWait)
	l.commentPages.init(owner, fetchCommentPages, pageLoaderWait)
	l.commentPagesWithAuthors.init(owner, fetchCommentPagesWithAuthors, pageLoaderWait)
	l.attachmentPages.init(owner, fetchAttachmentPages, pageLoaderWait)
}

// The fetches of the task loaders that are store functions answering keys in
// order.
var (
	fetchTasksByID       = batch((*store.DB).TasksByID)
	fetchTaskPages       = batch((*store.DB).TaskPages)
	fetchCommentPages    = batch((*store.DB).CommentPages)
	fetchAttachmentPages = batch((*store.DB).AttachmentPages)
)

// batch adapts a store method answering keys in order into a loader fetch
// function; an error fails every key of the batch.
func batch[K comparable, V any](fetch func(db *store.DB, ctx context.Context, keys []K) ([]V, error)) func(*Loaders, context.Context, []K) ([]V, []error) {
	return func(l *Loaders, ctx context.Context, keys []K) ([]V, []error) {
		vs, err := fetch(l.db, ctx, keys)
		if err != nil {
			return nil, []error{err}
		}
		return vs, nil
	}
}

// fetchCommentPagesWithAuthors is the fetch of commentPagesWithAuthors: it
// primes the user loader with the authors it reads.
func fetchCommentPagesWithAuthors(l *Loaders, ctx context.Context, keys []store.CommentPageKey) ([]*store.CommentConnection, []error) {
	pages, authors, err := l.db.CommentPagesWithAuthors(ctx, keys)
	if err != nil {
		return nil, []error{err}
	}
	for id, u := range authors {
		l.users.Prime(id, u)
	}
	return pages, nil
}

// optional converts a gqlgen input field that may be absent or null into the
// store's Optional.
func optional[T any](o graphql.Omittable[*T]) store.Optional[T] {
	return store.Optional[T]{Set: o.IsSet(), Value: o.Value()}
}

// primeTasks puts the tasks of a page read with fields into the task-by-id
// cache, so that hops back to them (a comment's task) cost no query; tasks
// with fewer than store.AllTaskFields set stay out of it.
func (l *taskLoaders) primeTasks(fields store.TaskFields, c *store.TaskConnection, err error) (*store.TaskConnection, error) {
	if err != nil {
		return nil, err
	}
	if fields != store.AllTaskFields {
		return c, nil
	}
	for _, e := range c.Edges {
		l.taskByID.Prime(e.Node.ID, e.Node)
	}
	return c, nil
}

// task loads the task a thing the viewer sees belongs to (a comment's, an
// attachment's); NOT_FOUND if it is gone.
func (l *taskLoaders) task(ctx context.Context, id string) (*store.Task, error) {
	t, err := l.taskByID.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errs.Errorf(errs.CodeNotFound, "task not found")
	}
	return t, nil
}

// primeTask puts one task into the task-by-id cache.
func (l *taskLoaders) primeTask(t *store.Task, err error) (*store.Task, error) {
	if err != nil {
		return nil, err
	}
	l.taskByID.Prime(t.ID, t)
	return t, nil
}

// taskChanged keeps the request's caches true after a task mutation (a document
// may run several mutations and read their results): it replaces or forgets the
// cached task (t nil: deleted) and forgets every cached page.
func (l *taskLoaders) taskChanged(id string, t *store.Task) {
	l.taskByID.Clear(id)
	if t != nil {
		l.taskByID.Prime(id, t)
	}
	l.taskPages.ClearAll()
	l.commentsChanged()
	l.attachmentPages.ClearAll()
}

// commentsChanged forgets every cached page of comments, after a comment
// mutation.
func (l *taskLoaders) commentsChanged() {
	l.commentPages.ClearAll()
	l.commentPagesWithAuthors.ClearAll()
}
