package resolvers_test

import (
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/store"
)

// pageReadsDescriptions reports whether one of the statements counter
// recorded reads a page of tasks (newest first) with their descriptions: a
// page of store.AllTaskFields does, one of store.ListedTaskFields does not.
func pageReadsDescriptions(counter *statementCounter) bool {
	for _, s := range counter.statements() {
		if strings.Contains(s, "t.description") && strings.Contains(s, "ORDER BY t.created_at DESC, t.id DESC") {
			return true
		}
	}
	return false
}

// insertListedTasks adds two tasks to w's project whose titles hold "login":
// "Login fails", done, urgent, described and assigned to w's member, whose
// id it returns, and "Login page", with the defaults.
func insertListedTasks(t *testing.T, env *apitest.Env, w *world) string {
	t.Helper()
	id := insertTask(t, env, w.project, "Login fails", "on every upgrade", store.TaskStatusDone, w.member)
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE tasks SET assignee_id = $2, priority = 'URGENT' WHERE id = $1`,
		id, w.member.ID); err != nil {
		t.Fatal(err)
	}
	insertTask(t, env, w.project, "Login page", "", store.TaskStatusTodo, w.member)
	return id
}

// beyondListed maps each Task field beyond the listed ones (as a selection)
// to what the answer for insertListedTasks' first task holds of it.
func beyondListed(w *world) map[string]string {
	return map[string]string{
		"description":      `"description":"on every upgrade"`,
		"assignee { id }":  `"assignee":{"id":"` + w.member.ID + `"}`,
		"project { id }":   `"project":{"id":"` + w.project + `"}`,
		"createdBy { id }": `"createdBy":{"id":"` + w.member.ID + `"}`,
		"updatedAt":        `"updatedAt":"20`,
		"dueDate":          `"dueDate":null`,
	}
}

// A page of a project's tasks that asks only for listed fields reads those
// columns only, by the lookahead of project(id) or by Project.tasks, and
// answers as a whole page does; a field beyond them, asked anywhere in the
// selection, makes the page whole. Its tasks stay out of the request's cache
// of tasks by id: a later hop to one of them (a comment's task) reads it whole.
func TestProjectTasksListedFields(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	w := newWorld(t, env)
	id := insertListedTasks(t, env, w)
	vars := map[string]any{"p": w.project, "t": id}
	type task struct {
		ID, Title, Status, Priority, CreatedAt, Typename string
		Description                                      *string
		Assignee                                         *struct{ ID string }
	}
	type page struct {
		Nodes []task
		Edges []struct {
			Cursor string
			Node   task
		}
		PageInfo struct{ HasNextPage bool }
	}
	read := func(query string, listed bool) page {
		t.Helper()
		var out struct {
			Project struct{ Tasks page }
			Task    struct{ Project struct{ Tasks page } }
		}
		counter.reset()
		mustCall(t, env, w.viewer, query, vars, &out)
		if got := !pageReadsDescriptions(counter); got != listed {
			t.Errorf("%s: read listed columns only = %v, want %v", query, got, listed)
		}
		if out.Task.Project.Tasks.Nodes != nil {
			return out.Task.Project.Tasks
		}
		return out.Project.Tasks
	}
	whole := read(`query($p: ID!) { project(id: $p) { tasks(first: 5) {
		nodes { id title status priority createdAt Typename: __typename description assignee { id } }
		edges { cursor node { id title status priority createdAt Typename: __typename } } pageInfo { hasNextPage } } } }`, false)
	if len(whole.Nodes) != 2 || whole.Nodes[1].ID != id || whole.Nodes[1].Description == nil ||
		*whole.Nodes[1].Description != "on every upgrade" || whole.Nodes[1].Assignee == nil {
		t.Fatalf("whole page = %+v", whole)
	}
	for _, query := range []string{
		// The lookahead of project(id), with nodes, edges and fragments.
		`query($p: ID!) { project(id: $p) { tasks(first: 5) {
			nodes { id title status priority createdAt Typename: __typename }
			edges { cursor node { ...on Task { id title } ...L } } pageInfo { hasNextPage } } } }
			fragment L on Task { status priority createdAt Typename: __typename }`,
		// Project.tasks under another field.
		`query($t: ID!) { task(id: $t) { project { tasks(first: 5) {
			nodes { id title status priority createdAt Typename: __typename }
			edges { cursor node { id title status priority createdAt Typename: __typename } } pageInfo { hasNextPage } } } } }`,
	} {
		listed := read(query, true)
		for i, n := range whole.Nodes {
			want := n
			want.Description, want.Assignee = nil, nil
			if len(listed.Nodes) != len(whole.Nodes) || listed.Nodes[i] != want || listed.Edges[i] != whole.Edges[i] {
				t.Errorf("%s: task %d = %+v, %+v; want %+v, %+v", query, i, listed.Nodes, listed.Edges, want, whole.Edges[i])
				break
			}
		}
		if listed.PageInfo != whole.PageInfo {
			t.Errorf("%s: page info %+v, want %+v", query, listed.PageInfo, whole.PageInfo)
		}
	}
	// Each field beyond the listed ones, asked alone beside them (or by
	// another alias of the same page), is answered.
	for field, want := range beyondListed(w) {
		for _, query := range []string{
			`query($p: ID!) { project(id: $p) { tasks(first: 5) { nodes { id title ` + field + ` } } } }`,
			`query($p: ID!) { project(id: $p) { a: tasks(first: 5) { nodes { id title } } b: tasks(first: 5) { nodes { id ` + field + ` } } } }`,
		} {
			counter.reset()
			r := call(t, env, w.viewer, query, vars)
			if len(r.Body.Errors) > 0 || !strings.Contains(string(r.Body.Data), want) {
				t.Errorf("%s: %s", query, r.Raw)
			}
			if !pageReadsDescriptions(counter) {
				t.Errorf("%s: read listed columns only", query)
			}
		}
	}
	// Mutations run one after the other: the listed page of the first is in
	// the request before the second hops to one of its tasks.
	var out struct {
		AddComment struct {
			Task task
		}
	}
	mustCall(t, env, w.owner, `mutation($p: ID!, $t: ID!) {
		updateProject(id: $p, input: {description: "listed"}) { tasks(first: 5) { nodes { id title } } }
		addComment(taskId: $t, body: "seen") { task { id title description assignee { id } } } }`, vars, &out)
	if got := out.AddComment.Task; got.ID != id || got.Description == nil || *got.Description != "on every upgrade" ||
		got.Assignee == nil || got.Assignee.ID != w.member.ID {
		t.Errorf("a comment's task after a listed page of it = %+v", got)
	}
}
