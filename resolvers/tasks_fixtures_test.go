package resolvers_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"taskflow/errs"
	"taskflow/httpapi/apitest"
	"taskflow/store"
)

// This file holds the SQL fixtures and call helpers of the task tests, so they do
// not depend on the account mutations.

// world is a workspace with one user of each role and a project.
type world struct {
	env       *apitest.Env
	workspace string
	project   string
	owner     apitest.User
	admin     apitest.User
	member    apitest.User
	viewer    apitest.User
}

// newWorld sets up a workspace with an OWNER, ADMIN, MEMBER and VIEWER and one project.
func newWorld(t testing.TB, env *apitest.Env) *world {
	t.Helper()
	w := &world{env: env}
	w.owner = env.NewUser(t, "Owner")
	w.admin = env.NewUser(t, "Admin")
	w.member = env.NewUser(t, "Member")
	w.viewer = env.NewUser(t, "Viewer")
	w.workspace = newWorkspace(t, env, "Acme", w.owner)
	addMember(t, env, w.workspace, w.admin, store.RoleAdmin)
	addMember(t, env, w.workspace, w.member, store.RoleMember)
	addMember(t, env, w.workspace, w.viewer, store.RoleViewer)
	w.project = newProject(t, env, w.workspace, "Website")
	return w
}

// newWorkspace inserts a workspace owned by owner.
func newWorkspace(t testing.TB, env *apitest.Env, name string, owner apitest.User) string {
	t.Helper()
	var id string
	if err := env.DB.Pool.QueryRow(t.Context(), `INSERT INTO workspaces (name) VALUES ($1) RETURNING id`, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	addMember(t, env, id, owner, store.RoleOwner)
	return id
}

// addMember inserts a membership.
func addMember(t testing.TB, env *apitest.Env, workspace string, u apitest.User, role store.Role) {
	t.Helper()
	if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, $3)`,
		workspace, u.ID, role); err != nil {
		t.Fatal(err)
	}
}

// newProject inserts a project.
func newProject(t testing.TB, env *apitest.Env, workspace, name string) string {
	t.Helper()
	var id string
	if err := env.DB.Pool.QueryRow(t.Context(), `INSERT INTO projects (workspace_id, name) VALUES ($1, $2) RETURNING id`,
		workspace, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// insertTask inserts a task straight into the database (no audit event).
func insertTask(t testing.TB, env *apitest.Env, project, title, description string, status store.TaskStatus, by apitest.User) string {
	t.Helper()
	var id string
	err := env.DB.Pool.QueryRow(t.Context(), `INSERT INTO tasks (project_id, workspace_id, title, description, status, created_by)
		SELECT id, workspace_id, $2, nullif($3, ''), $4, $5 FROM projects WHERE id = $1 RETURNING id`,
		project, title, description, status, by.ID).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// insertComment inserts a comment straight into the database (no audit event).
func insertComment(t testing.TB, env *apitest.Env, task, body string, by apitest.User) string {
	t.Helper()
	var id string
	err := env.DB.Pool.QueryRow(t.Context(), `INSERT INTO comments (task_id, workspace_id, author_id, body)
		SELECT id, workspace_id, $2, $3 FROM tasks WHERE id = $1 RETURNING id`, task, by.ID, body).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// call posts an operation over HTTP as u and returns the answer.
func call(t testing.TB, env *apitest.Env, u apitest.User, query string, vars map[string]any) *apitest.Response {
	t.Helper()
	return env.Post(t, u.Token, query, vars)
}

// mustCall posts an operation as u, fails on any error and decodes data into out.
func mustCall(t testing.TB, env *apitest.Env, u apitest.User, query string, vars map[string]any, out any) {
	t.Helper()
	r := call(t, env, u, query, vars)
	if len(r.Body.Errors) > 0 {
		t.Fatalf("unexpected errors: %s", r.Raw)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body.Data, out); err != nil {
			t.Fatalf("decode %s: %v", r.Body.Data, err)
		}
	}
}

// wantCode fails unless the answer is an error with the given code.
func wantCode(t testing.TB, r *apitest.Response, code errs.Code) {
	t.Helper()
	if got := r.Code(); got != string(code) {
		t.Fatalf("code = %q, want %q; body %s", got, code, r.Raw)
	}
}

// auditEvent is an audit row as the tests read it.
type auditEvent struct {
	Action    string
	ActorID   *string
	Workspace *string
	EntityID  string
	Metadata  map[string]any
}

// auditEvents returns the events with the given action (all when ""), oldest first.
func auditEvents(t testing.TB, env *apitest.Env, action string) []auditEvent {
	t.Helper()
	rows, err := env.DB.Pool.Query(t.Context(), `SELECT action, actor_id::text, workspace_id::text, entity_id, metadata
		FROM audit_events WHERE $1 = '' OR action = $1 ORDER BY occurred_at, id`, action)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditEvent
	for rows.Next() {
		var e auditEvent
		if err := rows.Scan(&e.Action, &e.ActorID, &e.Workspace, &e.EntityID, &e.Metadata); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// auditCount returns how many audit events exist.
func auditCount(t testing.TB, env *apitest.Env) int {
	t.Helper()
	return len(auditEvents(t, env, ""))
}

// str returns a description of v for messages.
func str(v any) string { return fmt.Sprintf("%v", v) }
