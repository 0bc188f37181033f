package resolvers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"taskflow/errs"
	"taskflow/httpapi/apitest"
	"taskflow/store"
)

// pageJSON is a connection page as the tests select it.
type pageJSON struct {
	Edges []struct {
		Cursor string
		Node   struct{ ID string }
	}
	Nodes    []struct{ ID string }
	PageInfo struct {
		HasNextPage bool
		EndCursor   *string
	}
}

// fetchPage returns a page, or the error answer.
type fetchPage func(first int, after *string) (*pageJSON, *apitest.Response)

// projectTasks pages a project's tasks through task(anchor).project.tasks.
func projectTasks(t testing.TB, env *apitest.Env, u apitest.User, anchor string, status *string) fetchPage {
	return func(first int, after *string) (*pageJSON, *apitest.Response) {
		t.Helper()
		r := call(t, env, u, `query($id: ID!, $status: TaskStatus, $first: Int, $after: String) {
			task(id: $id) { project { tasks(status: $status, first: $first, after: $after) {
				edges { cursor node { id } } nodes { id } pageInfo { hasNextPage endCursor } } } } }`,
			map[string]any{"id": anchor, "status": status, "first": first, "after": after})
		if len(r.Body.Errors) > 0 {
			return nil, r
		}
		var out struct {
			Task struct{ Project struct{ Tasks pageJSON } }
		}
		if err := json.Unmarshal(r.Body.Data, &out); err != nil {
			t.Fatal(err)
		}
		return &out.Task.Project.Tasks, r
	}
}

// taskComments pages a task's comments.
func taskComments(t testing.TB, env *apitest.Env, u apitest.User, task string) fetchPage {
	return func(first int, after *string) (*pageJSON, *apitest.Response) {
		t.Helper()
		r := call(t, env, u, `query($id: ID!, $first: Int, $after: String) {
			task(id: $id) { comments(first: $first, after: $after) {
				edges { cursor node { id } } nodes { id } pageInfo { hasNextPage endCursor } } } }`,
			map[string]any{"id": task, "first": first, "after": after})
		if len(r.Body.Errors) > 0 {
			return nil, r
		}
		var out struct{ Task struct{ Comments pageJSON } }
		if err := json.Unmarshal(r.Body.Data, &out); err != nil {
			t.Fatal(err)
		}
		return &out.Task.Comments, r
	}
}

// walk follows endCursor from the first page to the last and returns the ids in
// order, checking each page's shape (size, nodes = edges, endCursor = last edge).
func walk(t testing.TB, fetch fetchPage, first int) (ids []string, firstCursor string) {
	t.Helper()
	var after *string
	for range 1000 {
		p, r := fetch(first, after)
		if p == nil {
			t.Fatalf("page error: %s", r.Raw)
		}
		if len(p.Edges) > first || len(p.Nodes) != len(p.Edges) {
			t.Fatalf("page of %d edges, %d nodes for first=%d", len(p.Edges), len(p.Nodes), first)
		}
		for i, e := range p.Edges {
			if p.Nodes[i].ID != e.Node.ID {
				t.Fatal("nodes and edges differ")
			}
			ids = append(ids, e.Node.ID)
			if firstCursor == "" {
				firstCursor = e.Cursor
			}
		}
		if !p.PageInfo.HasNextPage {
			return ids, firstCursor
		}
		if len(p.Edges) != first || p.PageInfo.EndCursor == nil || *p.PageInfo.EndCursor != p.Edges[len(p.Edges)-1].Cursor {
			t.Fatalf("page with a next page: %d edges, endCursor %v", len(p.Edges), p.PageInfo.EndCursor)
		}
		after = p.PageInfo.EndCursor
	}
	t.Fatal("too many pages")
	return nil, ""
}

// idsBySQL returns ids from a query, in its order.
func idsBySQL(t testing.TB, env *apitest.Env, sql string, args ...any) []string {
	t.Helper()
	rows, err := env.DB.Pool.Query(t.Context(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func ptr[T any](v T) *T { return &v }

// Project.tasks walks newest first by (created_at, id), ties included, with and
// without a status filter; cursors only work with the project and filter they
// came from; first is 1..100.
func TestProjectTasksPagination(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	statuses := []store.TaskStatus{store.TaskStatusTodo, store.TaskStatusInProgress, store.TaskStatusDone}
	for i := range 23 {
		insertTask(t, env, w.project, fmt.Sprintf("task %d", i), "", statuses[i%3], w.member)
	}
	// Five tasks share one created_at: the id breaks the tie.
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE tasks SET created_at = '2025-01-01T00:00:00Z'
		WHERE id IN (SELECT id FROM tasks ORDER BY id LIMIT 5)`); err != nil {
		t.Fatal(err)
	}
	otherProject := newProject(t, env, w.workspace, "Other")
	otherTask := insertTask(t, env, otherProject, "elsewhere", "", store.TaskStatusDone, w.member)
	anchor := insertTask(t, env, w.project, "anchor", "", store.TaskStatusTodo, w.member)

	want := idsBySQL(t, env, `SELECT id FROM tasks WHERE project_id = $1 ORDER BY created_at DESC, id DESC`, w.project)
	for _, first := range []int{1, 5, 24, 100} {
		got, _ := walk(t, projectTasks(t, env, w.viewer, anchor, nil), first)
		if !slices.Equal(got, want) {
			t.Fatalf("first=%d: walked %v, want %v", first, got, want)
		}
	}
	wantDone := idsBySQL(t, env, `SELECT id FROM tasks WHERE project_id = $1 AND status = 'DONE'
		ORDER BY created_at DESC, id DESC`, w.project)
	gotDone, doneCursor := walk(t, projectTasks(t, env, w.viewer, anchor, ptr("DONE")), 3)
	if !slices.Equal(gotDone, wantDone) || len(wantDone) == 0 {
		t.Fatalf("DONE: walked %v, want %v", gotDone, wantDone)
	}
	if slices.Contains(gotDone, otherTask) {
		t.Fatal("another project's task listed")
	}

	// A cursor of one filter or project is refused by another.
	_, r := projectTasks(t, env, w.viewer, anchor, ptr("TODO"))(3, &doneCursor)
	wantCode(t, r, errs.CodeBadUserInput)
	_, r = projectTasks(t, env, w.viewer, anchor, nil)(3, &doneCursor)
	wantCode(t, r, errs.CodeBadUserInput)
	_, r = projectTasks(t, env, w.viewer, otherTask, ptr("DONE"))(3, &doneCursor)
	wantCode(t, r, errs.CodeBadUserInput)
	_, r = projectTasks(t, env, w.viewer, anchor, nil)(3, ptr("not a cursor"))
	wantCode(t, r, errs.CodeBadUserInput)
	for _, first := range []int{0, -1, 101} {
		_, r = projectTasks(t, env, w.viewer, anchor, nil)(first, nil)
		wantCode(t, r, errs.CodeBadUserInput)
	}
}

// Task.comments walks newest first; a cursor of one task's comments is refused
// for another task's.
func TestTaskCommentsPagination(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	task := insertTask(t, env, w.project, "chatty", "", store.TaskStatusTodo, w.member)
	other := insertTask(t, env, w.project, "quiet", "", store.TaskStatusTodo, w.member)
	for i := range 17 {
		insertComment(t, env, task, fmt.Sprintf("c%d", i), w.member)
	}
	insertComment(t, env, other, "elsewhere", w.member)
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE comments SET created_at = '2025-01-01T00:00:00Z'
		WHERE id IN (SELECT id FROM comments WHERE task_id = $1 ORDER BY id LIMIT 4)`, task); err != nil {
		t.Fatal(err)
	}
	want := idsBySQL(t, env, `SELECT id FROM comments WHERE task_id = $1 ORDER BY created_at DESC, id DESC`, task)
	for _, first := range []int{1, 4, 17, 20} {
		got, _ := walk(t, taskComments(t, env, w.viewer, task), first)
		if !slices.Equal(got, want) {
			t.Fatalf("first=%d: walked %v, want %v", first, got, want)
		}
	}
	_, cur := walk(t, taskComments(t, env, w.viewer, task), 4)
	_, r := taskComments(t, env, w.viewer, other)(4, &cur)
	wantCode(t, r, errs.CodeBadUserInput)
	_, r = taskComments(t, env, w.viewer, task)(101, nil)
	wantCode(t, r, errs.CodeBadUserInput)
}

// inserter adds rows in the background until stopped, and returns how many.
func inserter(t *testing.T, insert func(ctx context.Context, i int) error) (stop func() int) {
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var n int
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			if e := insert(ctx, i); e != nil {
				if ctx.Err() == nil {
					err = e
				}
				return
			}
			n++
		}
	}()
	return func() int {
		cancel()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// checkWalk asserts a walk made during inserts: no id twice, every id of before in
// it, in the order of before (new rows are newer, so they can only come first or
// be missed, never interleave with or displace older ones).
func checkWalk(t *testing.T, got, before []string, inserted int) {
	t.Helper()
	t.Logf("walked %d rows while %d were inserted", len(got), inserted)
	seen := map[string]bool{}
	var old []string
	oldSet := map[string]bool{}
	for _, id := range before {
		oldSet[id] = true
	}
	for _, id := range got {
		if seen[id] {
			t.Fatalf("id %s listed twice", id)
		}
		seen[id] = true
		if oldSet[id] {
			old = append(old, id)
		}
	}
	if !slices.Equal(old, before) {
		t.Fatalf("walk during %d inserts: old rows %v, want %v", inserted, old, before)
	}
}

// Walking every page while other requests insert tasks and comments never
// repeats or skips a row that existed when the walk began.
func TestPaginationDuringConcurrentInserts(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	anchor := insertTask(t, env, w.project, "anchor", "", store.TaskStatusTodo, w.member)
	for i := range 40 {
		insertTask(t, env, w.project, fmt.Sprintf("t%d", i), "", store.TaskStatusTodo, w.member)
		insertComment(t, env, anchor, fmt.Sprintf("c%d", i), w.member)
	}

	before := idsBySQL(t, env, `SELECT id FROM tasks WHERE project_id = $1 ORDER BY created_at DESC, id DESC`, w.project)
	stop := inserter(t, func(ctx context.Context, i int) error {
		_, err := env.DB.Pool.Exec(ctx, `INSERT INTO tasks (project_id, workspace_id, title, created_by)
			SELECT id, workspace_id, $2, $3 FROM projects WHERE id = $1`, w.project, fmt.Sprintf("new %d", i), w.member.ID)
		return err
	})
	got, _ := walk(t, projectTasks(t, env, w.viewer, anchor, ptr("TODO")), 3)
	checkWalk(t, got, before, stop())

	beforeC := idsBySQL(t, env, `SELECT id FROM comments WHERE task_id = $1 ORDER BY created_at DESC, id DESC`, anchor)
	stop = inserter(t, func(ctx context.Context, i int) error {
		_, err := env.DB.Pool.Exec(ctx, `INSERT INTO comments (task_id, workspace_id, author_id, body)
			SELECT id, workspace_id, $2, $3 FROM tasks WHERE id = $1`, anchor, w.member.ID, fmt.Sprintf("new %d", i))
		return err
	})
	gotC, _ := walk(t, taskComments(t, env, w.viewer, anchor), 3)
	checkWalk(t, gotC, beforeC, stop())
}
