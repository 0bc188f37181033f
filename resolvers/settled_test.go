package resolvers_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/graph"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/resolvers"
	"taskflow/store"
	"taskflow/store/storetest"
)

// goroutineWatch is the resolver root that records in which goroutines the
// concurrent fields of a page's tasks and comments (Task.assignee,
// Task.createdBy, Task.comments, Comment.author) were resolved.
type goroutineWatch struct {
	*resolvers.Resolver
	mu   sync.Mutex
	seen map[string]int // goroutine id: calls
}

func (w *goroutineWatch) record() {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id := strings.Fields(string(buf))[1]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen[id]++
}

// goroutines returns how many goroutines resolved the watched fields, and
// how many calls there were, since the last call.
func (w *goroutineWatch) goroutines() (goroutines, calls int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.seen {
		calls += n
	}
	goroutines = len(w.seen)
	w.seen = map[string]int{}
	return goroutines, calls
}

func (w *goroutineWatch) Task() graph.TaskResolver { return watchedTask{w.Resolver.Task(), w} }
func (w *goroutineWatch) Comment() graph.CommentResolver {
	return watchedComment{w.Resolver.Comment(), w}
}

type watchedTask struct {
	graph.TaskResolver
	w *goroutineWatch
}

func (t watchedTask) Assignee(ctx context.Context, obj *store.Task) (*store.User, error) {
	t.w.record()
	return t.TaskResolver.Assignee(ctx, obj)
}

func (t watchedTask) CreatedBy(ctx context.Context, obj *store.Task) (*store.User, error) {
	t.w.record()
	return t.TaskResolver.CreatedBy(ctx, obj)
}

func (t watchedTask) Comments(ctx context.Context, obj *store.Task, first *int, after *string) (*store.Connection[store.Comment], error) {
	t.w.record()
	return t.TaskResolver.Comments(ctx, obj, first, after)
}

type watchedComment struct {
	graph.CommentResolver
	w *goroutineWatch
}

func (c watchedComment) Author(ctx context.Context, obj *store.Comment) (*store.User, error) {
	c.w.record()
	return c.CommentResolver.Author(ctx, obj)
}

// requestStatements is statementCounter counting only the statements sent
// for a GraphQL operation (its context has one), not those of the
// handler's background readers (the live tailer, the revocation feed),
// which share the pool.
type requestStatements struct{ statementCounter }

func (c *requestStatements) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !graphql.HasOperationContext(ctx) {
		return ctx
	}
	return c.statementCounter.TraceQueryStart(ctx, conn, data)
}

func (c *requestStatements) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !graphql.HasOperationContext(ctx) {
		return ctx
	}
	return c.statementCounter.TraceBatchStart(ctx, conn, data)
}

func (c *requestStatements) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if graphql.HasOperationContext(ctx) {
		c.statementCounter.TraceBatchQuery(ctx, conn, data)
	}
}

// A page of tasks whose assignees, comments and comment authors the
// project's lookahead read with it is settled: its tasks and their comments
// are marshaled one after another and their concurrent fields resolved at
// once, all in one goroutine, with the answer of the concurrent path. A
// page whose selection reaches a field the lookahead did not read (createdBy,
// two different pages of comments) keeps gqlgen's goroutines, so that its
// loaders batch.
func TestSettledPageResolvesInOneGoroutine(t *testing.T) {
	t.Parallel()
	watch := &goroutineWatch{seen: map[string]int{}}
	counter := &requestStatements{}
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), nil)
	env := apitest.NewOn(t, db, func(o *httpapi.Options) {
		watch.Resolver = &resolvers.Resolver{DB: o.DB, AuditKeys: o.AuditKeys, Live: o.Live}
		o.Resolvers = watch
	})
	w := newWorld(t, env)
	const tasks = 6
	for i := range tasks {
		id := insertTask(t, env, w.project, fmt.Sprintf("Task %d", i), "", store.TaskStatusTodo, w.member)
		if i%2 == 0 { // every other task has no assignee
			if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE tasks SET assignee_id = $2 WHERE id = $1`, id, w.member.ID); err != nil {
				t.Fatal(err)
			}
		}
		for j := range i % 3 { // some tasks have no comments
			insertComment(t, env, id, fmt.Sprintf("Comment %d.%d", i, j), []apitest.User{w.owner, w.admin}[j%2])
		}
	}
	const page = `query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title %s } pageInfo { hasNextPage } } } }`
	// The round trips of the lookahead alone (after a first request, which
	// also reads the caller's token).
	mustCall(t, env, w.member, fmt.Sprintf(page, ""), map[string]any{"id": w.project}, nil)
	counter.reset()
	mustCall(t, env, w.member, fmt.Sprintf(page, ""), map[string]any{"id": w.project}, nil)
	lookahead := counter.roundTrips()
	comments := `comments(first: 5) { nodes { id body author { id name } } }`
	for _, c := range []struct {
		name, selection string
		calls           int // of the watched resolvers
		oneGoroutine    bool
	}{
		{"assignees, comments and their authors", `assignee { id name } ` + comments, tasks*2 + 6, true},
		{"assignees", `assignee { name }`, tasks, true},
		{"comments without authors", `comments(first: 2) { nodes { body } }`, tasks, true},
		{"through edges and fragments", `...F } edges { node { ...F }`, 2 * (tasks*2 + 6), true},
		{"createdBy, which the lookahead does not read", `createdBy { id } assignee { id }`, tasks * 2, false},
		{"two pages of comments", `a: comments(first: 1) { nodes { id } } b: comments(first: 2) { nodes { id } }`, tasks * 2, false},
	} {
		query := fmt.Sprintf(page, c.selection)
		if strings.Contains(c.selection, "...F") {
			query += ` fragment F on Task { assignee { id name } ` + comments + ` }`
		}
		watch.goroutines()
		counter.reset()
		var concurrent, settled map[string]any
		mustCall(t, env, w.member, query, map[string]any{"id": w.project}, &settled)
		goroutines, calls := watch.goroutines()
		// Settled, nothing waits for a loader: no read but the lookahead's.
		if trips := counter.roundTrips(); c.oneGoroutine && trips != lookahead {
			t.Errorf("%s: %d round trips, the lookahead alone %d:\n%s", c.name, trips, lookahead, strings.Join(counter.statements(), "\n"))
		}
		if calls != c.calls {
			t.Errorf("%s: %d calls of the watched resolvers, want %d", c.name, calls, c.calls)
		}
		if got := goroutines == 1; got != c.oneGoroutine {
			t.Errorf("%s: resolved in %d goroutines, want one: %t", c.name, goroutines, c.oneGoroutine)
		}
		// The same page read by fields without the lookahead (under
		// workspace { projects }, which reads no page with the project)
		// is the same answer.
		wrapped := fmt.Sprintf(`query($ws: ID!) { workspace(id: $ws) { projects(first: 1) { nodes { tasks(first: 20) { nodes { id title %s } pageInfo { hasNextPage } } } } } }`, c.selection)
		if strings.Contains(c.selection, "...F") {
			wrapped += ` fragment F on Task { assignee { id name } ` + comments + ` }`
		}
		mustCall(t, env, w.member, wrapped, map[string]any{"ws": w.workspace}, &concurrent)
		if g, _ := watch.goroutines(); g < 2 {
			t.Errorf("%s: the page without the lookahead was resolved in %d goroutine", c.name, g)
		}
		got := fmt.Sprint(settled["project"].(map[string]any)["tasks"])
		want := fmt.Sprint(concurrent["workspace"].(map[string]any)["projects"].(map[string]any)["nodes"].([]any)[0].(map[string]any)["tasks"])
		if got != want {
			t.Errorf("%s: settled page\n%s\nwithout the lookahead\n%s", c.name, got, want)
		}
	}
}
