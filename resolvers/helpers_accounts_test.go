package resolvers_test

import (
	"context"
	"encoding/json"
	"testing"

	"taskflow/httpapi/apitest"
)

// post sends a GraphQL operation over HTTP as token and returns the answer.
func post(t *testing.T, env *apitest.Env, token, query string, vars map[string]any) *apitest.Response {
	t.Helper()
	return env.Post(t, token, query, vars)
}

// mustData fails the test unless the answer has no errors, and decodes its data into out.
func mustData(t *testing.T, r *apitest.Response, out any) {
	t.Helper()
	if len(r.Body.Errors) > 0 {
		t.Fatalf("unexpected errors (HTTP %d): %s", r.Status, r.Raw)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body.Data, out); err != nil {
			t.Fatalf("decode %s: %v", r.Body.Data, err)
		}
	}
}

// wantErrCode fails the test unless the first error has extensions.code == code.
func wantErrCode(t *testing.T, r *apitest.Response, code string) {
	t.Helper()
	if got := r.Code(); got != code {
		t.Fatalf("code = %q, want %q; body %s", got, code, r.Raw)
	}
}

// mkWorkspace creates a workspace owned by owner and returns its id.
func mkWorkspace(t *testing.T, env *apitest.Env, owner apitest.User) string {
	t.Helper()
	var d struct{ CreateWorkspace struct{ ID string } }
	mustData(t, post(t, env, owner.Token, `mutation($n: String!) { createWorkspace(input: {name: $n}) { id } }`,
		map[string]any{"n": "ws " + owner.Email}), &d)
	return d.CreateWorkspace.ID
}

// joinWorkspace makes u a member of ws with role: owner invites u's e-mail and
// u accepts.
func joinWorkspace(t *testing.T, env *apitest.Env, owner apitest.User, ws string, u apitest.User, role string) {
	t.Helper()
	id := invite(t, env, owner, ws, u.Email, role)
	mustData(t, post(t, env, u.Token, acceptMutation, map[string]any{"id": id}), nil)
}

// invite invites email to ws with role, acting as inviter, and returns the
// invitation's id.
func invite(t *testing.T, env *apitest.Env, inviter apitest.User, ws, email, role string) string {
	t.Helper()
	var d struct{ InviteMember struct{ ID string } }
	mustData(t, post(t, env, inviter.Token, inviteMutation, map[string]any{"w": ws, "e": email, "r": role}), &d)
	return d.InviteMember.ID
}

// mkProject creates a project in ws as u and returns its id.
func mkProject(t *testing.T, env *apitest.Env, u apitest.User, ws, name string) string {
	t.Helper()
	var d struct{ CreateProject struct{ ID string } }
	mustData(t, post(t, env, u.Token, `mutation($w: ID!, $n: String!) { createProject(input: {workspaceId: $w, name: $n}) { id } }`,
		map[string]any{"w": ws, "n": name}), &d)
	return d.CreateProject.ID
}

// countEvents counts the audit events with this action and entity id (and
// workspace, unless ws is "").
func countEvents(t *testing.T, env *apitest.Env, ws, action, entityID string) int {
	t.Helper()
	q := `SELECT count(*) FROM audit_events WHERE action = $1 AND entity_id = $2`
	args := []any{action, entityID}
	if ws != "" {
		q += ` AND workspace_id = $3`
		args = append(args, ws)
	}
	var n int
	if err := env.DB.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// workspaceEvents counts every audit event of a workspace.
func workspaceEvents(t *testing.T, env *apitest.Env, ws string) int {
	t.Helper()
	var n int
	if err := env.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE workspace_id = $1`, ws).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// roleOf returns u's role in ws straight from the database ("" if not a member).
func roleOf(t *testing.T, env *apitest.Env, ws, userID string) string {
	t.Helper()
	var r string
	err := env.DB.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT role FROM members WHERE workspace_id = $1 AND user_id = $2), '')`,
		ws, userID).Scan(&r)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
