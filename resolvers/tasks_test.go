package resolvers_test

import (
	"github.com/99designs/gqlgen/client"

	"strings"
	"testing"

	"taskflow/errs"
	"taskflow/httpapi/apitest"
	"taskflow/store"
)

const createTaskQ = `mutation($in: CreateTaskInput!) { createTask(input: $in) {
	id title description status priority dueDate assignee { id } createdBy { id } project { id } } }`

const updateTaskQ = `mutation($id: ID!, $in: UpdateTaskInput!) { updateTask(id: $id, input: $in) {
	id title description status priority dueDate assignee { id } } }`

const deleteTaskQ = `mutation($id: ID!) { deleteTask(id: $id) }`

const addCommentQ = `mutation($task: ID!, $body: String!) { addComment(taskId: $task, body: $body) {
	id body author { id } task { id } } }`

const updateCommentQ = `mutation($id: ID!, $body: String!) { updateComment(id: $id, body: $body) { id body } }`

const deleteCommentQ = `mutation($id: ID!) { deleteComment(id: $id) }`

// taskJSON is a task as the tests select it.
type taskJSON struct {
	ID          string
	Title       string
	Description *string
	Status      string
	Priority    string
	DueDate     *string
	Assignee    *struct{ ID string }
	CreatedBy   struct{ ID string }
	Project     struct{ ID string }
}

func createTask(t *testing.T, env *apitest.Env, u apitest.User, in map[string]any) taskJSON {
	t.Helper()
	var out struct{ CreateTask taskJSON }
	mustCall(t, env, u, createTaskQ, map[string]any{"in": in}, &out)
	return out.CreateTask
}

// A MEMBER creates a task: the title is trimmed, status and priority default to
// TODO and MEDIUM, the creator is the caller, and task.created records the fields.
func TestCreateTaskDefaultsAndAudit(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	task := createTask(t, env, w.member, map[string]any{"projectId": w.project, "title": "  Write the docs \n"})
	if task.Title != "Write the docs" || task.Status != "TODO" || task.Priority != "MEDIUM" {
		t.Fatalf("task = %+v", task)
	}
	if task.CreatedBy.ID != w.member.ID || task.Project.ID != w.project || task.Assignee != nil || task.Description != nil {
		t.Fatalf("task = %+v", task)
	}
	evs := auditEvents(t, env, "task.created")
	if len(evs) != 1 {
		t.Fatalf("task.created events = %d, want 1", len(evs))
	}
	e := evs[0]
	if e.EntityID != task.ID || *e.ActorID != w.member.ID || *e.Workspace != w.workspace {
		t.Fatalf("event = %+v", e)
	}
	if e.Metadata["title"] != "Write the docs" || e.Metadata["status"] != "TODO" || e.Metadata["projectId"] != w.project {
		t.Fatalf("metadata = %v", e.Metadata)
	}

	// Explicit values win over the defaults, and an assignee who is a member is accepted.
	task = createTask(t, env, w.member, map[string]any{"projectId": w.project, "title": "Ship", "description": "soon",
		"status": "IN_PROGRESS", "priority": "URGENT", "assigneeId": w.viewer.ID, "dueDate": "2030-01-02T03:04:05Z"})
	if task.Status != "IN_PROGRESS" || task.Priority != "URGENT" || task.Assignee == nil || task.Assignee.ID != w.viewer.ID ||
		task.DueDate == nil || *task.DueDate != "2030-01-02T03:04:05Z" || *task.Description != "soon" {
		t.Fatalf("task = %+v", task)
	}
}

// Invalid input to createTask is BAD_USER_INPUT, an archived project CONFLICT, and
// none of them leaves a task or an audit event.
func TestCreateTaskRefusals(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	stranger := env.NewUser(t, "Stranger")
	otherWS := newWorkspace(t, env, "Other", stranger)
	archived := newProject(t, env, w.workspace, "Old")
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE projects SET archived_at = now() WHERE id = $1`, archived); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   map[string]any
		code errs.Code
	}{
		{"blank title", map[string]any{"projectId": w.project, "title": "  \t "}, errs.CodeBadUserInput},
		{"long title", map[string]any{"projectId": w.project, "title": strings.Repeat("x", store.MaxTitleLength+1)}, errs.CodeBadUserInput},
		{"assignee not a member", map[string]any{"projectId": w.project, "title": "t", "assigneeId": stranger.ID}, errs.CodeBadUserInput},
		{"assignee malformed", map[string]any{"projectId": w.project, "title": "t", "assigneeId": "nope"}, errs.CodeBadUserInput},
		{"archived project", map[string]any{"projectId": archived, "title": "t"}, errs.CodeConflict},
		{"project of another workspace", map[string]any{"projectId": newProject(t, env, otherWS, "Theirs"), "title": "t"}, errs.CodeNotFound},
		{"malformed project id", map[string]any{"projectId": "123", "title": "t"}, errs.CodeNotFound},
		{"unknown project", map[string]any{"projectId": "00000000-0000-0000-0000-000000000001", "title": "t"}, errs.CodeNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantCode(t, call(t, env, w.member, createTaskQ, map[string]any{"in": c.in}), c.code)
		})
	}
	// A title of exactly the maximum length is fine.
	createTask(t, env, w.member, map[string]any{"projectId": w.project, "title": strings.Repeat("é", store.MaxTitleLength)})
	var n int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM tasks`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(auditEvents(t, env, "task.created")) != 1 {
		t.Fatalf("tasks = %d, task.created events = %d; want 1 and 1", n, len(auditEvents(t, env, "task.created")))
	}
	// Anonymous callers are UNAUTHENTICATED.
	wantCode(t, env.Post(t, "", createTaskQ, map[string]any{"in": map[string]any{"projectId": w.project, "title": "x"}}),
		errs.CodeUnauthenticated)
}

// Every task mutation: a VIEWER is FORBIDDEN, MEMBER, ADMIN and OWNER may, a
// non-member gets NOT_FOUND; refusals leave no audit event.
func TestTaskMutationRoles(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	outsider := env.NewUser(t, "Outsider")
	newWorkspace(t, env, "Elsewhere", outsider)

	before := auditCount(t, env)
	in := map[string]any{"projectId": w.project, "title": "t"}
	wantCode(t, call(t, env, w.viewer, createTaskQ, map[string]any{"in": in}), errs.CodeForbidden)
	wantCode(t, call(t, env, outsider, createTaskQ, map[string]any{"in": in}), errs.CodeNotFound)
	id := insertTask(t, env, w.project, "existing", "", store.TaskStatusTodo, w.owner)
	upd := map[string]any{"id": id, "in": map[string]any{"title": "changed"}}
	wantCode(t, call(t, env, w.viewer, updateTaskQ, upd), errs.CodeForbidden)
	wantCode(t, call(t, env, outsider, updateTaskQ, upd), errs.CodeNotFound)
	wantCode(t, call(t, env, w.viewer, deleteTaskQ, map[string]any{"id": id}), errs.CodeForbidden)
	wantCode(t, call(t, env, outsider, deleteTaskQ, map[string]any{"id": id}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, updateTaskQ, map[string]any{"id": "bad-id", "in": map[string]any{"title": "x"}}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, deleteTaskQ, map[string]any{"id": "bad-id"}), errs.CodeNotFound)
	wantCode(t, call(t, env, outsider, `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": id}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": "x"}), errs.CodeNotFound)
	if n := auditCount(t, env); n != before {
		t.Fatalf("refused mutations wrote %d audit events", n-before)
	}
	var title string
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT title FROM tasks WHERE id = $1`, id).Scan(&title); err != nil || title != "existing" {
		t.Fatalf("task after refusals: %q, %v", title, err)
	}

	for _, u := range []apitest.User{w.member, w.admin, w.owner} {
		task := createTask(t, env, u, map[string]any{"projectId": w.project, "title": "by " + u.ID})
		var got struct{ UpdateTask taskJSON }
		mustCall(t, env, u, updateTaskQ, map[string]any{"id": task.ID, "in": map[string]any{"priority": "HIGH"}}, &got)
		if got.UpdateTask.Priority != "HIGH" {
			t.Fatalf("priority = %q", got.UpdateTask.Priority)
		}
		var del struct{ DeleteTask bool }
		mustCall(t, env, u, deleteTaskQ, map[string]any{"id": task.ID}, &del)
		if !del.DeleteTask {
			t.Fatal("deleteTask returned false")
		}
		wantCode(t, call(t, env, u, `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": task.ID}), errs.CodeNotFound)
		// The viewer can read tasks.
		mustCall(t, env, w.viewer, `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": id}, nil)
	}
	for _, action := range []string{"task.created", "task.updated", "task.deleted"} {
		evs := auditEvents(t, env, action)
		if len(evs) != 3 {
			t.Fatalf("%s events = %d, want 3", action, len(evs))
		}
	}
	del := auditEvents(t, env, "task.deleted")[0]
	if del.Metadata["title"] == nil || del.Metadata["priority"] != "HIGH" {
		t.Fatalf("task.deleted metadata = %v", del.Metadata)
	}
}

// updateTask changes only the fields given; an explicit null clears description,
// assignee and due date, and is BAD_USER_INPUT for title, status and priority.
// The audit event records exactly the changed fields.
func TestUpdateTaskNullVersusAbsent(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	task := createTask(t, env, w.member, map[string]any{"projectId": w.project, "title": "T", "description": "D",
		"assigneeId": w.member.ID, "dueDate": "2031-05-06T07:08:09Z", "priority": "LOW"})

	var got struct{ UpdateTask taskJSON }
	mustCall(t, env, w.member, updateTaskQ, map[string]any{"id": task.ID, "in": map[string]any{"status": "DONE"}}, &got)
	u := got.UpdateTask
	if u.Status != "DONE" || u.Title != "T" || u.Description == nil || *u.Description != "D" || u.Assignee == nil ||
		u.DueDate == nil || u.Priority != "LOW" {
		t.Fatalf("after status-only update: %+v", u)
	}
	evs := auditEvents(t, env, "task.updated")
	if len(evs) != 1 {
		t.Fatalf("task.updated events = %d", len(evs))
	}
	changes, _ := evs[0].Metadata["changes"].(map[string]any)
	if len(changes) != 1 || str(changes["status"]) != str(map[string]any{"from": "TODO", "to": "DONE"}) {
		t.Fatalf("changes = %v", changes)
	}

	mustCall(t, env, w.member, updateTaskQ, map[string]any{"id": task.ID,
		"in": map[string]any{"description": nil, "assigneeId": nil}}, &got)
	u = got.UpdateTask
	if u.Description != nil || u.Assignee != nil || u.DueDate == nil || u.Title != "T" || u.Status != "DONE" {
		t.Fatalf("after clearing: %+v", u)
	}
	changes, _ = auditEvents(t, env, "task.updated")[1].Metadata["changes"].(map[string]any)
	if len(changes) != 2 || changes["description"] == nil || changes["assigneeId"] == nil {
		t.Fatalf("changes = %v", changes)
	}

	mustCall(t, env, w.member, updateTaskQ, map[string]any{"id": task.ID, "in": map[string]any{"dueDate": nil}}, &got)
	if got.UpdateTask.DueDate != nil {
		t.Fatalf("dueDate not cleared: %+v", got.UpdateTask)
	}

	before := auditCount(t, env)
	for _, in := range []map[string]any{
		{"title": nil}, {"status": nil}, {"priority": nil}, {"title": "   "},
		{"assigneeId": env.NewUser(t, "Nobody").ID}, {"title": "ok", "status": nil},
	} {
		wantCode(t, call(t, env, w.member, updateTaskQ, map[string]any{"id": task.ID, "in": in}), errs.CodeBadUserInput)
	}
	// An update that changes nothing records nothing.
	mustCall(t, env, w.member, updateTaskQ, map[string]any{"id": task.ID, "in": map[string]any{"title": "T"}}, &got)
	mustCall(t, env, w.member, updateTaskQ, map[string]any{"id": task.ID, "in": map[string]any{}}, &got)
	if n := auditCount(t, env); n != before {
		t.Fatalf("refused or empty updates wrote %d audit events", n-before)
	}
	if got.UpdateTask.Title != "T" || got.UpdateTask.Status != "DONE" {
		t.Fatalf("task changed by refused updates: %+v", got.UpdateTask)
	}
}

// Comments: MEMBER+ adds; only the author or an ADMIN/OWNER edits or deletes; a
// VIEWER does none of it; refusals record nothing; each action records its event.
func TestCommentRoles(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	other := env.NewUser(t, "Other")
	addMember(t, env, w.workspace, other, store.RoleMember)
	outsider := env.NewUser(t, "Outsider")
	newWorkspace(t, env, "Elsewhere", outsider)
	task := insertTask(t, env, w.project, "discuss", "", store.TaskStatusTodo, w.owner)

	add := func(u apitest.User, body string) string {
		t.Helper()
		var out struct {
			AddComment struct {
				ID, Body string
				Author   struct{ ID string }
				Task     struct{ ID string }
			}
		}
		mustCall(t, env, u, addCommentQ, map[string]any{"task": task, "body": body}, &out)
		c := out.AddComment
		if c.Author.ID != u.ID || c.Task.ID != task || c.Body != strings.TrimSpace(body) {
			t.Fatalf("comment = %+v", c)
		}
		return c.ID
	}
	before := auditCount(t, env)
	wantCode(t, call(t, env, w.viewer, addCommentQ, map[string]any{"task": task, "body": "hi"}), errs.CodeForbidden)
	wantCode(t, call(t, env, outsider, addCommentQ, map[string]any{"task": task, "body": "hi"}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, addCommentQ, map[string]any{"task": task, "body": "  "}), errs.CodeBadUserInput)
	wantCode(t, call(t, env, w.member, addCommentQ, map[string]any{"task": "zzz", "body": "hi"}), errs.CodeNotFound)
	if n := auditCount(t, env); n != before {
		t.Fatalf("refused addComment wrote %d events", n-before)
	}

	c := add(w.member, "  first thoughts ")
	for _, u := range []apitest.User{other, w.viewer} {
		wantCode(t, call(t, env, u, updateCommentQ, map[string]any{"id": c, "body": "hijack"}), errs.CodeForbidden)
		wantCode(t, call(t, env, u, deleteCommentQ, map[string]any{"id": c}), errs.CodeForbidden)
	}
	wantCode(t, call(t, env, outsider, updateCommentQ, map[string]any{"id": c, "body": "x"}), errs.CodeNotFound)
	wantCode(t, call(t, env, outsider, deleteCommentQ, map[string]any{"id": c}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, updateCommentQ, map[string]any{"id": "nope", "body": "x"}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, deleteCommentQ, map[string]any{"id": "nope"}), errs.CodeNotFound)
	wantCode(t, call(t, env, w.member, updateCommentQ, map[string]any{"id": c, "body": ""}), errs.CodeBadUserInput)
	if n := auditCount(t, env); n != before+1 {
		t.Fatalf("audit events = %d, want %d", n, before+1)
	}

	// The author edits; an ADMIN and an OWNER override.
	var upd struct{ UpdateComment struct{ ID, Body string } }
	mustCall(t, env, w.member, updateCommentQ, map[string]any{"id": c, "body": "second thoughts"}, &upd)
	if upd.UpdateComment.Body != "second thoughts" {
		t.Fatalf("body = %q", upd.UpdateComment.Body)
	}
	mustCall(t, env, w.admin, updateCommentQ, map[string]any{"id": c, "body": "moderated"}, &upd)
	mustCall(t, env, w.owner, updateCommentQ, map[string]any{"id": c, "body": "owned"}, &upd)
	if upd.UpdateComment.Body != "owned" {
		t.Fatalf("body = %q", upd.UpdateComment.Body)
	}
	ev := auditEvents(t, env, "comment.updated")
	if len(ev) != 3 || *ev[1].ActorID != w.admin.ID {
		t.Fatalf("comment.updated events = %+v", ev)
	}
	changes, _ := ev[2].Metadata["changes"].(map[string]any)
	if str(changes) != str(map[string]any{"body": map[string]any{"from": "moderated", "to": "owned"}}) {
		t.Fatalf("changes = %v", changes)
	}

	var del struct{ DeleteComment bool }
	mustCall(t, env, w.member, deleteCommentQ, map[string]any{"id": c}, &del)
	c2 := add(other, "mine")
	mustCall(t, env, w.admin, deleteCommentQ, map[string]any{"id": c2}, &del)
	c3 := add(w.admin, "admin's")
	mustCall(t, env, w.owner, deleteCommentQ, map[string]any{"id": c3}, &del)
	wantCode(t, call(t, env, w.owner, deleteCommentQ, map[string]any{"id": c3}), errs.CodeNotFound)

	if n := len(auditEvents(t, env, "comment.created")); n != 3 {
		t.Fatalf("comment.created events = %d", n)
	}
	dels := auditEvents(t, env, "comment.deleted")
	if len(dels) != 3 || dels[0].EntityID != c || dels[0].Metadata["body"] != "owned" || dels[0].Metadata["authorId"] != w.member.ID {
		t.Fatalf("comment.deleted events = %+v", dels)
	}
	// A demoted author can no longer edit their comment.
	c4 := add(other, "before demotion")
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE members SET role = 'VIEWER' WHERE user_id = $1`, other.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, call(t, env, other, updateCommentQ, map[string]any{"id": c4, "body": "after"}), errs.CodeForbidden)
}

// Deleting a task deletes its comments too.
func TestDeleteTaskDeletesComments(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	task := insertTask(t, env, w.project, "gone", "", store.TaskStatusTodo, w.owner)
	insertComment(t, env, task, "a", w.member)
	mustCall(t, env, w.member, deleteTaskQ, map[string]any{"id": task}, nil)
	var n int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM comments`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("comments left: %d, %v", n, err)
	}
}

// Query.task through the gqlgen client: every field of a task, its comments
// newest first, and the hops to project, assignee, creator and authors.
func TestQueryTaskFields(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	task := createTask(t, env, w.member, map[string]any{"projectId": w.project, "title": "Read me", "description": "all of it",
		"assigneeId": w.admin.ID, "priority": "HIGH", "dueDate": "2032-02-03T04:05:06+02:00"})
	first := insertComment(t, env, task.ID, "one", w.member)
	second := insertComment(t, env, task.ID, "two", w.admin)
	var out struct {
		Task struct {
			ID, Title, Status, Priority, CreatedAt, UpdatedAt string
			Description, DueDate                              *string
			Project                                           struct{ ID, Name string }
			Assignee                                          struct{ ID, Email string }
			CreatedBy                                         struct{ ID string }
			Comments                                          struct {
				Nodes []struct {
					ID, Body string
					Author   struct{ ID string }
					Task     struct{ Title string }
				}
				PageInfo struct{ HasNextPage bool }
			}
		}
	}
	env.Client.MustPost(`query($id: ID!) { task(id: $id) { id title status priority createdAt updatedAt description dueDate
		project { id name } assignee { id email } createdBy { id }
		comments { nodes { id body author { id } task { title } } pageInfo { hasNextPage } } } }`, &out,
		client.Var("id", task.ID), w.viewer.Auth(), client.Path("/query"))
	got := out.Task
	if got.ID != task.ID || got.Title != "Read me" || got.Priority != "HIGH" || got.Status != "TODO" || *got.Description != "all of it" {
		t.Fatalf("task = %+v", got)
	}
	if *got.DueDate != "2032-02-03T02:05:06Z" || got.CreatedAt == "" || got.UpdatedAt == "" {
		t.Fatalf("times = %v %q %q", *got.DueDate, got.CreatedAt, got.UpdatedAt)
	}
	if got.Project.ID != w.project || got.Project.Name != "Website" || got.Assignee.ID != w.admin.ID ||
		got.Assignee.Email != w.admin.Email || got.CreatedBy.ID != w.member.ID {
		t.Fatalf("hops = %+v", got)
	}
	cs := got.Comments.Nodes
	if len(cs) != 2 || cs[0].ID != second || cs[1].ID != first || cs[0].Author.ID != w.admin.ID ||
		cs[1].Task.Title != "Read me" || got.Comments.PageInfo.HasNextPage {
		t.Fatalf("comments = %+v", got.Comments)
	}
}

// Several mutations in one document each read their results fresh: the task and
// comment caches of the request are refreshed after each change.
func TestMutationsInOneDocumentReadFreshResults(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	w := newWorld(t, env)
	id := insertTask(t, env, w.project, "zero", "", store.TaskStatusTodo, w.member)
	var out struct {
		A, B struct {
			Project struct {
				Tasks struct{ Nodes []struct{ Title string } }
			}
		}
		C, D struct {
			Task struct {
				Comments struct{ Nodes []struct{ Body string } }
			}
		}
	}
	mustCall(t, env, w.member, `mutation($id: ID!) {
		a: updateTask(id: $id, input: {title: "one"}) { project { tasks { nodes { title } } } }
		b: updateTask(id: $id, input: {title: "two"}) { project { tasks { nodes { title } } } }
		c: addComment(taskId: $id, body: "first") { task { comments { nodes { body } } } }
		d: addComment(taskId: $id, body: "second") { task { comments { nodes { body } } } }
	}`, map[string]any{"id": id}, &out)
	if a, b := out.A.Project.Tasks.Nodes, out.B.Project.Tasks.Nodes; len(a) != 1 || a[0].Title != "one" || len(b) != 1 || b[0].Title != "two" {
		t.Fatalf("a = %+v, b = %+v", a, b)
	}
	if c, d := out.C.Task.Comments.Nodes, out.D.Task.Comments.Nodes; len(c) != 1 || len(d) != 2 || d[0].Body != "second" {
		t.Fatalf("c = %+v, d = %+v", c, d)
	}
}
