package idempotency_test

import (
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
)

// A replay answers with the stored result, and the fields under it are read
// fresh; some of those (a comment's task, a task's comments, a project's
// tasks) have no access check of their own. A member removed since the first
// call must not read the workspace through a replay: NOT_FOUND, as for any
// non-member. A member still in the workspace gets the replay.
func TestReplayByRemovedMemberRevealsNothing(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner, m := env.SignUp(t, "own"), env.SignUp(t, "mem")
	w := env.Post(t, owner.Token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)
	wsID := ws(t, w, "createWorkspace")["id"]
	if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`,
		wsID, m.ID); err != nil {
		t.Fatal(err)
	}
	p := env.Post(t, owner.Token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "P"}) { id } }`,
		map[string]any{"w": wsID})
	projectID := ws(t, p, "createProject")["id"]
	tk := env.Post(t, owner.Token, `mutation($p: ID!) { createTask(input: {projectId: $p, title: "T"}) { id } }`,
		map[string]any{"p": projectID})
	taskID := ws(t, tk, "createTask")["id"]
	calls := []struct {
		name, query string
		vars        map[string]any
	}{
		{"addComment", `mutation($t: ID!) { addComment(taskId: $t, body: "hi", idempotencyKey: "c1") {
			id task { title description comments { nodes { body } } } } }`, map[string]any{"t": taskID}},
		{"createTask", `mutation($p: ID!) { createTask(input: {projectId: $p, title: "mine"}, idempotencyKey: "t1") {
			id comments { nodes { body } } } }`, map[string]any{"p": projectID}},
		{"updateProject", `mutation($p: ID!) { updateProject(id: $p, input: {name: "P2"}, idempotencyKey: "p1") {
			id tasks { nodes { title description } } } }`, map[string]any{"p": projectID}},
	}
	for _, c := range calls {
		if r := env.Post(t, m.Token, c.query, c.vars); r.Code() != "" {
			t.Fatalf("%s: %s", c.name, r.Raw)
		}
		if r := env.Post(t, m.Token, c.query, c.vars); r.Code() != "" || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s replayed to a member: %s", c.name, r.Raw)
		}
	}
	if r := env.Post(t, owner.Token, `mutation($w: ID!, $u: ID!) { removeMember(workspaceId: $w, userId: $u) }`,
		map[string]any{"w": wsID, "u": m.ID}); r.Code() != "" {
		t.Fatalf("remove: %s", r.Raw)
	}
	env.Post(t, owner.Token, `mutation($id: ID!) { updateTask(id: $id, input: {title: "Secret", description: "after removal"}) { id } }`,
		map[string]any{"id": taskID})
	env.Post(t, owner.Token, `mutation($t: ID!) { addComment(taskId: $t, body: "secret comment") { id } }`,
		map[string]any{"t": taskID})
	for _, c := range calls {
		r := env.Post(t, m.Token, c.query, c.vars)
		if r.Code() != "NOT_FOUND" || strings.Contains(string(r.Raw), "ecret") {
			t.Errorf("%s replayed after removal: %s", c.name, r.Raw)
		}
	}
}
