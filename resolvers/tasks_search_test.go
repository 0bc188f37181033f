package resolvers_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"taskflow/errs"
	"taskflow/httpapi/apitest"
	"taskflow/store"
)

const searchQ = `query($ws: ID!, $q: String!, $first: Int, $after: String) {
	searchTasks(workspaceId: $ws, query: $q, first: $first, after: $after) {
		edges { cursor node { id } } nodes { id } pageInfo { hasNextPage endCursor } } }`

// search pages the results of one search.
func search(t testing.TB, env *apitest.Env, u apitest.User, ws, q string) fetchPage {
	return func(first int, after *string) (*pageJSON, *apitest.Response) {
		t.Helper()
		r := call(t, env, u, searchQ, map[string]any{"ws": ws, "q": q, "first": first, "after": after})
		if len(r.Body.Errors) > 0 {
			return nil, r
		}
		var out struct{ SearchTasks pageJSON }
		if err := json.Unmarshal(r.Body.Data, &out); err != nil {
			t.Fatal(err)
		}
		return &out.SearchTasks, r
	}
}

// searchIDs returns every result of a search in one page.
func searchIDs(t testing.TB, env *apitest.Env, u apitest.User, ws, q string) []string {
	t.Helper()
	p, r := search(t, env, u, ws, q)(100, nil)
	if p == nil {
		t.Fatalf("search %q: %s", q, r.Raw)
	}
	if p.PageInfo.HasNextPage {
		t.Fatalf("search %q has more than 100 results", q)
	}
	ids := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		ids[i] = n.ID
	}
	return ids
}

// searchTasks matches titles and descriptions with websearch syntax, title matches
// rank above description matches, and only the workspace's tasks are found.
func TestSearchTasksRankingAndConfinement(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	other := newProject(t, env, w.workspace, "Backend")
	inDesc := insertTask(t, env, w.project, "Refactor the session code", "users cannot login after the upgrade", store.TaskStatusTodo, w.member)
	inTitle := insertTask(t, env, other, "Login fails", "", store.TaskStatusDone, w.member)
	both := insertTask(t, env, w.project, "Fix login redirect", "login redirects loop forever", store.TaskStatusTodo, w.member)
	unrelated := insertTask(t, env, w.project, "Write the docs", "about logging", store.TaskStatusTodo, w.member)
	stranger := env.NewUser(t, "Stranger")
	theirWS := newWorkspace(t, env, "Theirs", stranger)
	theirs := insertTask(t, env, newProject(t, env, theirWS, "P"), "Login page", "login login", store.TaskStatusTodo, stranger)

	got := searchIDs(t, env, w.viewer, w.workspace, "logins")
	if !slices.Equal(got, []string{both, inTitle, inDesc}) {
		t.Fatalf("search logins = %v, want [both %s, title %s, description %s]", got, both, inTitle, inDesc)
	}
	if slices.Contains(got, unrelated) || slices.Contains(got, theirs) {
		t.Fatal("unrelated or other workspace's task found")
	}
	if got := searchIDs(t, env, stranger, theirWS, "login"); !slices.Equal(got, []string{theirs}) {
		t.Fatalf("stranger's search = %v", got)
	}
	// websearch syntax: phrases and exclusions.
	if got := searchIDs(t, env, w.member, w.workspace, `"login redirect"`); !slices.Equal(got, []string{both}) {
		t.Fatalf("phrase search = %v", got)
	}
	if got := searchIDs(t, env, w.member, w.workspace, `login -redirect`); !slices.Equal(got, []string{inTitle, inDesc}) {
		t.Fatalf("exclusion search = %v", got)
	}
	// Only stop words: a valid query with no results.
	if got := searchIDs(t, env, w.member, w.workspace, `the and`); len(got) != 0 {
		t.Fatalf("stop-word search = %v", got)
	}
	// A deleted task is no longer found; an updated one is found by its new title.
	mustCall(t, env, w.member, deleteTaskQ, map[string]any{"id": inTitle}, nil)
	mustCall(t, env, w.member, updateTaskQ, map[string]any{"id": unrelated, "in": map[string]any{"title": "Login docs"}}, nil)
	if got := searchIDs(t, env, w.member, w.workspace, "login"); !slices.Contains(got, unrelated) || slices.Contains(got, inTitle) {
		t.Fatalf("search after changes = %v", got)
	}

	wantCode(t, call(t, env, stranger, searchQ, map[string]any{"ws": w.workspace, "q": "login"}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, searchQ, map[string]any{"ws": "nope", "q": "login"}), errs.CodeNotFound)
	wantCode(t, env.Post(t, "", searchQ, map[string]any{"ws": w.workspace, "q": "login"}), errs.CodeUnauthenticated)
	for _, q := range []string{"", "   "} {
		wantCode(t, call(t, env, w.member, searchQ, map[string]any{"ws": w.workspace, "q": q}), errs.CodeBadUserInput)
	}
	wantCode(t, call(t, env, w.member, searchQ, map[string]any{"ws": w.workspace, "q": "x", "first": 0}), errs.CodeBadUserInput)
}

// Paging a ranked list with many equal ranks gives every result once, in the
// order of the one-page answer; cursors are bound to the workspace and query.
func TestSearchTasksPagination(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	for i := range 12 {
		insertTask(t, env, w.project, "Deploy pipeline", fmt.Sprintf("step %d", i), store.TaskStatusTodo, w.member)
	}
	for i := range 7 {
		insertTask(t, env, w.project, fmt.Sprintf("Chore %d", i), "deploy the thing", store.TaskStatusTodo, w.member)
	}
	insertTask(t, env, w.project, "Deploy deploy deploy", "deploy", store.TaskStatusTodo, w.member)
	// Ties on rank and created_at: the id decides.
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE tasks SET created_at = '2025-01-01T00:00:00Z'
		WHERE id IN (SELECT id FROM tasks ORDER BY id LIMIT 6)`); err != nil {
		t.Fatal(err)
	}
	want := searchIDs(t, env, w.member, w.workspace, "deploy")
	if len(want) != 20 {
		t.Fatalf("results = %d, want 20", len(want))
	}
	wantSQL := idsBySQL(t, env, `SELECT id FROM tasks WHERE search @@ websearch_to_tsquery('english', 'deploy')
		ORDER BY ts_rank(search, websearch_to_tsquery('english', 'deploy')) DESC, created_at DESC, id DESC`)
	if !slices.Equal(want, wantSQL) {
		t.Fatalf("order = %v, want %v", want, wantSQL)
	}
	for _, first := range []int{1, 3, 7, 19} {
		got, _ := walk(t, search(t, env, w.member, w.workspace, "deploy"), first)
		if !slices.Equal(got, want) {
			t.Fatalf("first=%d: walked %v, want %v", first, got, want)
		}
	}
	_, cur := walk(t, search(t, env, w.member, w.workspace, "deploy"), 3)
	_, r := search(t, env, w.member, w.workspace, "pipeline")(3, &cur)
	wantCode(t, r, errs.CodeBadUserInput)
	ws2 := newWorkspace(t, env, "Second", w.member)
	_, r = search(t, env, w.member, ws2, "deploy")(3, &cur)
	wantCode(t, r, errs.CodeBadUserInput)
	// A project-list cursor is not a search cursor.
	_, taskCur := walk(t, projectTasks(t, env, w.member, want[0], nil), 3)
	_, r = search(t, env, w.member, w.workspace, "deploy")(3, &taskCur)
	wantCode(t, r, errs.CodeBadUserInput)
}

// A search whose tasks are asked only for what a list shows (id, title,
// status, priority, createdAt) reads only those columns
// (store.ListedTaskFields) and answers as a search of whole tasks does, in
// nodes, edges and fragments alike; one that asks for more (here the
// description, the assignee, the project) gets whole tasks. In the same
// request, task(id) of a found task still answers all of it.
func TestSearchTasksListedFields(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	id := insertListedTasks(t, env, w)
	type task struct {
		ID, Title, Status, Priority, CreatedAt, Typename string
		Description                                      *string
		Assignee, Project                                *struct{ ID string }
	}
	var listed, whole struct {
		SearchTasks struct {
			Nodes []task
			Edges []struct {
				Cursor string
				Node   task
			}
		}
		Task *task
	}
	mustCall(t, env, w.viewer, `query($ws: ID!, $id: ID!) { searchTasks(workspaceId: $ws, query: "login") {
		nodes { id title status priority createdAt Typename: __typename }
		edges { cursor node { ...on Task { id title } ...L } } }
		task(id: $id) { id description assignee { id } project { id } } }
		fragment L on Task { status priority }`, map[string]any{"ws": w.workspace, "id": id}, &listed)
	mustCall(t, env, w.viewer, `query($ws: ID!) { searchTasks(workspaceId: $ws, query: "login") {
		nodes { id title status priority createdAt Typename: __typename description assignee { id } project { id } }
		edges { cursor node { id title status priority } } } }`, map[string]any{"ws": w.workspace}, &whole)
	if len(whole.SearchTasks.Nodes) != 2 || len(listed.SearchTasks.Nodes) != 2 {
		t.Fatalf("found %d and %d tasks, want 2", len(listed.SearchTasks.Nodes), len(whole.SearchTasks.Nodes))
	}
	for i, n := range whole.SearchTasks.Nodes {
		l := listed.SearchTasks.Nodes[i]
		if l.ID != n.ID || l.Title != n.Title || l.Status != n.Status || l.Priority != n.Priority ||
			l.CreatedAt != n.CreatedAt || l.Typename != "Task" || n.Project == nil || n.Project.ID != w.project {
			t.Errorf("task %d: listed %+v, whole %+v", i, l, n)
		}
		if e, f := listed.SearchTasks.Edges[i], whole.SearchTasks.Edges[i]; e != f {
			t.Errorf("edge %d: listed %+v, whole %+v", i, e, f)
		}
	}
	i := slices.IndexFunc(whole.SearchTasks.Nodes, func(n task) bool { return n.ID == id })
	if i < 0 {
		t.Fatalf("task %s not found", id)
	}
	first := whole.SearchTasks.Nodes[i]
	if first.Priority != "URGENT" || first.Status != "DONE" || first.Description == nil ||
		*first.Description != "on every upgrade" || first.Assignee == nil || first.Assignee.ID != w.member.ID {
		t.Errorf("whole search's task = %+v", first)
	}
	// Each field beyond the listed ones, asked alone beside them, is answered.
	for field, want := range beyondListed(w) {
		r := call(t, env, w.viewer, `query($ws: ID!) { searchTasks(workspaceId: $ws, query: "login") { nodes { id title `+field+` } } }`,
			map[string]any{"ws": w.workspace})
		if len(r.Body.Errors) > 0 || !strings.Contains(string(r.Body.Data), want) {
			t.Errorf("search asking %s: %s", field, r.Raw)
		}
	}
	if got := listed.Task; got == nil || got.Description == nil || *got.Description != "on every upgrade" ||
		got.Assignee == nil || got.Assignee.ID != w.member.ID || got.Project == nil || got.Project.ID != w.project {
		t.Errorf("task(id) beside a listed search = %+v", got)
	}
}
