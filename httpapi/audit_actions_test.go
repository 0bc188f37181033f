package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"taskflow/httpapi/apitest"
)

// auditLoggedEvent is an audit row as the database holds it.
type auditLoggedEvent struct {
	Action, EntityType, EntityID string
	WorkspaceID, ActorID         *string
	IP, UserAgent, RequestID     *string
	Metadata                     map[string]any
	raw                          string
}

var auditRequestSeq atomic.Int64

// auditActionCall runs one operation over real HTTP with its own request id and user
// agent, and returns the answer and the audit events that request wrote.
func auditActionCall(t *testing.T, env *apitest.Env, token, query string, vars map[string]any, files ...apitest.File) (*apitest.Response, []auditLoggedEvent) {
	t.Helper()
	rid := fmt.Sprintf("audit-req-%d-%s", auditRequestSeq.Add(1), strings.ReplaceAll(t.Name(), "/", "-"))
	ua := "audit-test-agent/1.0 (" + rid + ")"
	var res *apitest.Response
	if len(files) > 0 {
		res = env.Upload(t, token, query, vars, files, "X-Request-ID", rid, "User-Agent", ua)
	} else {
		res = env.Post(t, token, query, vars, "X-Request-ID", rid, "User-Agent", ua)
	}
	if got := res.Header.Get("X-Request-ID"); got != rid {
		t.Fatalf("X-Request-ID = %q, want %q", got, rid)
	}
	rows, err := env.DB.Pool.Query(context.Background(), `SELECT action, entity_type, entity_id, workspace_id::text,
		actor_id::text, ip, user_agent, request_id, metadata::text FROM audit_events WHERE request_id = $1 ORDER BY occurred_at`, rid)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditLoggedEvent
	for rows.Next() {
		var e auditLoggedEvent
		if err := rows.Scan(&e.Action, &e.EntityType, &e.EntityID, &e.WorkspaceID, &e.ActorID, &e.IP, &e.UserAgent, &e.RequestID, &e.raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(e.raw), &e.Metadata); err != nil {
			t.Fatal(err)
		}
		if e.IP == nil || *e.IP != "127.0.0.1" || e.UserAgent == nil || *e.UserAgent != ua || e.RequestID == nil || *e.RequestID != rid {
			t.Errorf("%s: context ip=%v ua=%v rid=%v", e.Action, auditDeref(e.IP), auditDeref(e.UserAgent), auditDeref(e.RequestID))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return res, out
}

func auditDeref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// one checks that a successful operation wrote exactly one event of action,
// about entity, by actor (nil: none), in workspace (nil: an account event).
func auditOne(t *testing.T, res *apitest.Response, evs []auditLoggedEvent, action, entity string, actor, workspace *string) auditLoggedEvent {
	t.Helper()
	if res.Code() != "" {
		t.Fatalf("%s: %s", action, res.Raw)
	}
	if len(evs) != 1 {
		t.Fatalf("%s wrote %d events: %+v", action, len(evs), evs)
	}
	e := evs[0]
	if e.Action != action || e.EntityType != strings.SplitN(action, ".", 2)[0] || e.EntityID != entity {
		t.Errorf("event = %s %s %s, want %s about %s", e.Action, e.EntityType, e.EntityID, action, entity)
	}
	if auditDeref(e.ActorID) != auditDeref(actor) || auditDeref(e.WorkspaceID) != auditDeref(workspace) {
		t.Errorf("%s: actor %s workspace %s, want %s %s", action, auditDeref(e.ActorID), auditDeref(e.WorkspaceID), auditDeref(actor), auditDeref(workspace))
	}
	for _, secret := range []string{"correct horse", "password", "hash", "token", "argon"} {
		if strings.Contains(strings.ToLower(e.raw), secret) && !strings.Contains(e.raw, `"reason"`) {
			t.Errorf("%s metadata mentions %q: %s", action, secret, e.raw)
		}
	}
	return e
}

// none checks that a refused operation failed with code and wrote no event.
func auditNone(t *testing.T, what string, res *apitest.Response, evs []auditLoggedEvent, code string) {
	t.Helper()
	if res.Code() != code {
		t.Errorf("%s: code %q, want %q: %s", what, res.Code(), code, res.Raw)
	}
	if len(evs) != 0 {
		t.Errorf("%s (refused) wrote events: %+v", what, evs)
	}
}

// Every account, workspace, member and project action of the contract writes
// exactly one event, in its transaction, with actor, IP, user agent and request
// id; a refused or failed change writes none.
func TestAuditEveryAccountAndProjectAction(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	data := func(res *apitest.Response, v any) {
		t.Helper()
		if err := json.Unmarshal(res.Body.Data, v); err != nil {
			t.Fatalf("%v: %s", err, res.Raw)
		}
	}

	// user.registered
	email := fmt.Sprintf("alice-%d@example.com", auditRequestSeq.Add(1))
	reg := `mutation($in: RegisterInput!) { register(input: $in) { token user { id } } }`
	res, evs := auditActionCall(t, env, "", reg, map[string]any{"in": map[string]any{"email": email, "password": "correct horse", "name": "Alice"}})
	var r struct {
		Register struct {
			Token string
			User  struct{ ID string }
		}
	}
	data(res, &r)
	alice, aliceTok := r.Register.User.ID, r.Register.Token
	e := auditOne(t, res, evs, "user.registered", alice, &alice, nil)
	if e.Metadata["email"] != email || e.Metadata["name"] != "Alice" {
		t.Errorf("user.registered metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, "", reg, map[string]any{"in": map[string]any{"email": email, "password": "correct horse", "name": "Again"}})
	auditNone(t, "register a taken e-mail", res, evs, "CONFLICT")
	res, evs = auditActionCall(t, env, "", reg, map[string]any{"in": map[string]any{"email": "x@example.com", "password": "short", "name": "X"}})
	auditNone(t, "register a short password", res, evs, "BAD_USER_INPUT")

	// user.logged_in, user.login_failed (known and unknown e-mail)
	login := `mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }`
	res, evs = auditActionCall(t, env, "", login, map[string]any{"e": email, "p": "correct horse"})
	auditOne(t, res, evs, "user.logged_in", alice, &alice, nil)
	res, evs = auditActionCall(t, env, "", login, map[string]any{"e": email, "p": "wrong password"})
	if res.Code() != "UNAUTHENTICATED" || len(evs) != 1 || evs[0].Action != "user.login_failed" || evs[0].EntityID != alice || evs[0].WorkspaceID != nil {
		t.Errorf("wrong password: %s, events %+v", res.Raw, evs)
	}
	res, evs = auditActionCall(t, env, "", login, map[string]any{"e": "nobody-" + email, "p": "wrong password"})
	if res.Code() != "UNAUTHENTICATED" || len(evs) != 1 || evs[0].Action != "user.login_failed" || evs[0].EntityID != "" || evs[0].ActorID != nil {
		t.Errorf("unknown e-mail: %s, events %+v", res.Raw, evs)
	}

	// workspace.created
	res, evs = auditActionCall(t, env, aliceTok, `mutation { createWorkspace(input: {name: "Acme"}) { id } }`, nil)
	var w struct{ CreateWorkspace struct{ ID string } }
	data(res, &w)
	ws := w.CreateWorkspace.ID
	e = auditOne(t, res, evs, "workspace.created", ws, &alice, &ws)
	if e.Metadata["name"] != "Acme" {
		t.Errorf("workspace.created metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, aliceTok, `mutation { createWorkspace(input: {name: ""}) { id } }`, nil)
	auditNone(t, "empty workspace name", res, evs, "BAD_USER_INPUT")

	// member.invited, member.joined, member.invitation_declined,
	// member.invitation_revoked, member.role_changed, member.removed
	bob := env.NewUser(t, "Bob")
	carol := env.NewUser(t, "Carol")
	invite := `mutation($ws: ID!, $e: String!, $r: Role!) { inviteMember(workspaceId: $ws, email: $e, role: $r) { id } }`
	invited := func(res *apitest.Response) string {
		t.Helper()
		var iv struct{ InviteMember struct{ ID string } }
		data(res, &iv)
		return iv.InviteMember.ID
	}
	res, evs = auditActionCall(t, env, aliceTok, invite, map[string]any{"ws": ws, "e": bob.Email, "r": "VIEWER"})
	bobInv := invited(res)
	e = auditOne(t, res, evs, "member.invited", bobInv, &alice, &ws)
	if e.Metadata["role"] != "VIEWER" || e.Metadata["email"] != bob.Email || e.Metadata["workspaceId"] != ws || e.Metadata["userId"] != nil {
		t.Errorf("member.invited metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, aliceTok, invite, map[string]any{"ws": ws, "e": bob.Email, "r": "MEMBER"})
	auditNone(t, "invite an invited e-mail", res, evs, "CONFLICT")
	res, evs = auditActionCall(t, env, carol.Token, invite, map[string]any{"ws": ws, "e": carol.Email, "r": "OWNER"})
	auditNone(t, "stranger invites", res, evs, "NOT_FOUND")
	accept := `mutation($id: ID!) { acceptInvitation(id: $id) { id } }`
	res, evs = auditActionCall(t, env, carol.Token, accept, map[string]any{"id": bobInv})
	auditNone(t, "accept another's invitation", res, evs, "NOT_FOUND")
	res, evs = auditActionCall(t, env, bob.Token, accept, map[string]any{"id": bobInv})
	e = auditOne(t, res, evs, "member.joined", bob.ID, &bob.ID, &ws)
	if e.Metadata["role"] != "VIEWER" || e.Metadata["userId"] != bob.ID || e.Metadata["invitationId"] != bobInv || e.Metadata["invitedById"] != alice {
		t.Errorf("member.joined metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, aliceTok, invite, map[string]any{"ws": ws, "e": bob.Email, "r": "MEMBER"})
	auditNone(t, "invite a member", res, evs, "CONFLICT")
	res, evs = auditActionCall(t, env, bob.Token, invite, map[string]any{"ws": ws, "e": carol.Email, "r": "VIEWER"})
	auditNone(t, "viewer invites", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, aliceTok, `mutation($ws: ID!, $e: String!) { addMember(workspaceId: $ws, email: $e, role: VIEWER) { role } }`,
		map[string]any{"ws": ws, "e": carol.Email})
	auditNone(t, "addMember (deprecated)", res, evs, "FORBIDDEN")

	res, evs = auditActionCall(t, env, aliceTok, invite, map[string]any{"ws": ws, "e": carol.Email, "r": "ADMIN"})
	carolInv := invited(res)
	auditOne(t, res, evs, "member.invited", carolInv, &alice, &ws)
	res, evs = auditActionCall(t, env, carol.Token, `mutation($id: ID!) { declineInvitation(id: $id) }`, map[string]any{"id": carolInv})
	e = auditOne(t, res, evs, "member.invitation_declined", carolInv, &carol.ID, &ws)
	if e.Metadata["role"] != "ADMIN" || e.Metadata["email"] != carol.Email {
		t.Errorf("member.invitation_declined metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, aliceTok, invite, map[string]any{"ws": ws, "e": carol.Email, "r": "MEMBER"})
	carolInv = invited(res)
	auditOne(t, res, evs, "member.invited", carolInv, &alice, &ws)
	revoke := `mutation($id: ID!) { revokeInvitation(id: $id) }`
	res, evs = auditActionCall(t, env, carol.Token, revoke, map[string]any{"id": carolInv})
	auditNone(t, "invitee revokes", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, aliceTok, revoke, map[string]any{"id": carolInv})
	e = auditOne(t, res, evs, "member.invitation_revoked", carolInv, &alice, &ws)
	if e.Metadata["role"] != "MEMBER" || e.Metadata["email"] != carol.Email {
		t.Errorf("member.invitation_revoked metadata = %v", e.Metadata)
	}

	role := `mutation($ws: ID!, $u: ID!, $r: Role!) { updateMemberRole(workspaceId: $ws, userId: $u, role: $r) { role } }`
	res, evs = auditActionCall(t, env, aliceTok, role, map[string]any{"ws": ws, "u": bob.ID, "r": "MEMBER"})
	e = auditOne(t, res, evs, "member.role_changed", bob.ID, &alice, &ws)
	if ch, _ := e.Metadata["changes"].(map[string]any); ch == nil || fmt.Sprint(ch["role"]) != "map[from:VIEWER to:MEMBER]" {
		t.Errorf("member.role_changed metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, aliceTok, role, map[string]any{"ws": ws, "u": alice, "r": "ADMIN"})
	auditNone(t, "demote the last owner", res, evs, "CONFLICT")
	res, evs = auditActionCall(t, env, bob.Token, role, map[string]any{"ws": ws, "u": bob.ID, "r": "OWNER"})
	auditNone(t, "member promotes self", res, evs, "FORBIDDEN")

	// project.created, project.updated, project.archived
	res, evs = auditActionCall(t, env, bob.Token, `mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "Roadmap", description: "Q3"}) { id } }`,
		map[string]any{"ws": ws})
	var p struct{ CreateProject struct{ ID string } }
	data(res, &p)
	proj := p.CreateProject.ID
	e = auditOne(t, res, evs, "project.created", proj, &bob.ID, &ws)
	if e.Metadata["name"] != "Roadmap" || e.Metadata["description"] != "Q3" {
		t.Errorf("project.created metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, bob.Token, `mutation($id: ID!) { updateProject(id: $id, input: {name: "Roadmap 2"}) { id } }`, map[string]any{"id": proj})
	e = auditOne(t, res, evs, "project.updated", proj, &bob.ID, &ws)
	if ch, _ := e.Metadata["changes"].(map[string]any); len(ch) != 1 || fmt.Sprint(ch["name"]) != "map[from:Roadmap to:Roadmap 2]" {
		t.Errorf("project.updated metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, bob.Token, `mutation($id: ID!) { archiveProject(id: $id) { id } }`, map[string]any{"id": proj})
	auditNone(t, "member archives a project", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, carol.Token, `mutation($id: ID!) { updateProject(id: $id, input: {name: "x"}) { id } }`, map[string]any{"id": proj})
	auditNone(t, "stranger updates a project", res, evs, "NOT_FOUND")
	res, evs = auditActionCall(t, env, aliceTok, `mutation($id: ID!) { archiveProject(id: $id) { id } }`, map[string]any{"id": proj})
	auditOne(t, res, evs, "project.archived", proj, &alice, &ws)

	res, evs = auditActionCall(t, env, aliceTok, `mutation($ws: ID!, $u: ID!) { removeMember(workspaceId: $ws, userId: $u) }`, map[string]any{"ws": ws, "u": bob.ID})
	auditOne(t, res, evs, "member.removed", bob.ID, &alice, &ws)
	res, evs = auditActionCall(t, env, aliceTok, `mutation($ws: ID!, $u: ID!) { removeMember(workspaceId: $ws, userId: $u) }`, map[string]any{"ws": ws, "u": alice})
	auditNone(t, "remove the last owner", res, evs, "CONFLICT")

	// Bob left, but his events (joined, two on the project) keep his id and he
	// is still the actor.
	res = env.Post(t, aliceTok, `query($ws: ID!, $a: ID!) { auditEvents(workspaceId: $ws, filter: {actorId: $a}) { nodes { action actorId actor { id } } } }`,
		map[string]any{"ws": ws, "a": bob.ID})
	if res.Code() != "" || strings.Count(string(res.Raw), `"actor":{"id":"`+bob.ID+`"}`) != 3 {
		t.Errorf("events of a member who left: %s", res.Raw)
	}
	// The whole log of the workspace verifies, and counts every event above.
	res = env.Post(t, aliceTok, `query($ws: ID!) { verifyAuditLog(workspaceId: $ws) { valid checkedEvents } }`, map[string]any{"ws": ws})
	if !strings.Contains(string(res.Raw), `{"valid":true,"checkedEvents":12}`) {
		t.Errorf("verify: %s", res.Raw)
	}
	// Alice's account events through me.
	res = env.Post(t, aliceTok, `{ me { auditEvents { nodes { action } } } }`, nil)
	if !strings.Contains(string(res.Raw), `[{"action":"user.login_failed"},{"action":"user.logged_in"},{"action":"user.registered"}]`) {
		t.Errorf("me.auditEvents: %s", res.Raw)
	}
}

// Every task and comment action of the contract writes exactly one event with
// its context and the right metadata; a refused or failed change writes none,
// including one that fails in the database after the checks passed.
func TestAuditEveryTaskAndCommentAction(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	alice := env.SignUp(t, "Alice")
	bob, carol, dave := env.NewUser(t, "Bob"), env.NewUser(t, "Carol"), env.NewUser(t, "Dave")
	post := func(token, q string, vars map[string]any, v any) {
		t.Helper()
		res := env.Post(t, token, q, vars)
		if res.Code() != "" {
			t.Fatalf("%s", res.Raw)
		}
		if v != nil {
			if err := json.Unmarshal(res.Body.Data, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	var w struct{ CreateWorkspace struct{ ID string } }
	post(alice.Token, `mutation { createWorkspace(input: {name: "Acme"}) { id } }`, nil, &w)
	ws := w.CreateWorkspace.ID
	for u, role := range map[apitest.User]string{bob: "MEMBER", carol: "VIEWER"} {
		var iv struct{ InviteMember struct{ ID string } }
		post(alice.Token, `mutation($ws: ID!, $e: String!, $r: Role!) { inviteMember(workspaceId: $ws, email: $e, role: $r) { id } }`,
			map[string]any{"ws": ws, "e": u.Email, "r": role}, &iv)
		post(u.Token, `mutation($id: ID!) { acceptInvitation(id: $id) { id } }`, map[string]any{"id": iv.InviteMember.ID}, nil)
	}
	var p struct{ CreateProject struct{ ID string } }
	post(bob.Token, `mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "P"}) { id } }`, map[string]any{"ws": ws}, &p)
	proj := p.CreateProject.ID

	create := `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`
	res, evs := auditActionCall(t, env, bob.Token, create, map[string]any{"in": map[string]any{"projectId": proj, "title": "Ship it",
		"description": "soon", "priority": "HIGH", "assigneeId": bob.ID, "dueDate": "2026-12-24T10:00:00+01:00"}})
	var tk struct{ CreateTask struct{ ID string } }
	if err := json.Unmarshal(res.Body.Data, &tk); err != nil {
		t.Fatalf("%s", res.Raw)
	}
	task := tk.CreateTask.ID
	e := auditOne(t, res, evs, "task.created", task, &bob.ID, &ws)
	if e.Metadata["title"] != "Ship it" || e.Metadata["priority"] != "HIGH" || e.Metadata["assigneeId"] != bob.ID ||
		e.Metadata["dueDate"] != "2026-12-24T09:00:00Z" || e.Metadata["projectId"] != proj {
		t.Errorf("task.created metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, carol.Token, create, map[string]any{"in": map[string]any{"projectId": proj, "title": "x"}})
	auditNone(t, "viewer creates a task", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, bob.Token, create, map[string]any{"in": map[string]any{"projectId": proj, "title": ""}})
	auditNone(t, "empty title", res, evs, "BAD_USER_INPUT")
	res, evs = auditActionCall(t, env, dave.Token, create, map[string]any{"in": map[string]any{"projectId": proj, "title": "x"}})
	auditNone(t, "stranger creates a task", res, evs, "NOT_FOUND")

	update := `mutation($id: ID!, $in: UpdateTaskInput!) { updateTask(id: $id, input: $in) { id } }`
	res, evs = auditActionCall(t, env, bob.Token, update, map[string]any{"id": task, "in": map[string]any{"status": "IN_PROGRESS", "title": "Ship it now", "priority": "HIGH"}})
	e = auditOne(t, res, evs, "task.updated", task, &bob.ID, &ws)
	ch, _ := e.Metadata["changes"].(map[string]any)
	if len(ch) != 2 || fmt.Sprint(ch["status"]) != "map[from:TODO to:IN_PROGRESS]" || fmt.Sprint(ch["title"]) != "map[from:Ship it to:Ship it now]" {
		t.Errorf("task.updated changes = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, carol.Token, update, map[string]any{"id": task, "in": map[string]any{"title": "x"}})
	auditNone(t, "viewer updates a task", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, bob.Token, update, map[string]any{"id": task, "in": map[string]any{"assigneeId": dave.ID}})
	auditNone(t, "assign a non-member", res, evs, "BAD_USER_INPUT")

	add := `mutation($t: ID!, $b: String!) { addComment(taskId: $t, body: $b) { id } }`
	res, evs = auditActionCall(t, env, bob.Token, add, map[string]any{"t": task, "b": "first!"})
	var c struct{ AddComment struct{ ID string } }
	if err := json.Unmarshal(res.Body.Data, &c); err != nil {
		t.Fatalf("%s", res.Raw)
	}
	comment := c.AddComment.ID
	e = auditOne(t, res, evs, "comment.created", comment, &bob.ID, &ws)
	if e.Metadata["body"] != "first!" || e.Metadata["taskId"] != task || e.Metadata["authorId"] != bob.ID {
		t.Errorf("comment.created metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, carol.Token, add, map[string]any{"t": task, "b": "viewer"})
	auditNone(t, "viewer comments", res, evs, "FORBIDDEN")

	upd := `mutation($id: ID!, $b: String!) { updateComment(id: $id, body: $b) { id } }`
	res, evs = auditActionCall(t, env, bob.Token, upd, map[string]any{"id": comment, "b": "edited"})
	e = auditOne(t, res, evs, "comment.updated", comment, &bob.ID, &ws)
	if ch, _ := e.Metadata["changes"].(map[string]any); fmt.Sprint(ch["body"]) != "map[from:first! to:edited]" {
		t.Errorf("comment.updated metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, carol.Token, upd, map[string]any{"id": comment, "b": "not mine"})
	auditNone(t, "viewer edits another's comment", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, dave.Token, upd, map[string]any{"id": comment, "b": "stranger"})
	auditNone(t, "stranger edits a comment", res, evs, "NOT_FOUND")

	res, evs = auditActionCall(t, env, carol.Token, `mutation($id: ID!) { deleteComment(id: $id) }`, map[string]any{"id": comment})
	auditNone(t, "viewer deletes a comment", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, alice.Token, `mutation($id: ID!) { deleteComment(id: $id) }`, map[string]any{"id": comment})
	e = auditOne(t, res, evs, "comment.deleted", comment, &alice.ID, &ws)
	if e.Metadata["body"] != "edited" {
		t.Errorf("comment.deleted metadata = %v", e.Metadata)
	}
	res, evs = auditActionCall(t, env, alice.Token, `mutation($id: ID!) { deleteComment(id: $id) }`, map[string]any{"id": comment})
	auditNone(t, "delete a deleted comment", res, evs, "NOT_FOUND")

	res, evs = auditActionCall(t, env, carol.Token, `mutation($id: ID!) { deleteTask(id: $id) }`, map[string]any{"id": task})
	auditNone(t, "viewer deletes a task", res, evs, "FORBIDDEN")
	res, evs = auditActionCall(t, env, bob.Token, `mutation($id: ID!) { deleteTask(id: $id) }`, map[string]any{"id": task})
	e = auditOne(t, res, evs, "task.deleted", task, &bob.ID, &ws)
	if e.Metadata["title"] != "Ship it now" || e.Metadata["status"] != "IN_PROGRESS" {
		t.Errorf("task.deleted metadata = %v", e.Metadata)
	}

	// workspace.created, 2 member.invited and member.joined, project.created and
	// the 6 events above.
	res = env.Post(t, alice.Token, `query($ws: ID!) { verifyAuditLog(workspaceId: $ws) { valid checkedEvents }
		auditEvents(workspaceId: $ws, filter: {actions: ["task.*", "comment.*"]}) { nodes { action } } }`, map[string]any{"ws": ws})
	if !strings.Contains(string(res.Raw), `{"valid":true,"checkedEvents":12}`) ||
		!strings.Contains(string(res.Raw), `[{"action":"task.deleted"},{"action":"comment.deleted"},{"action":"comment.updated"},{"action":"comment.created"},{"action":"task.updated"},{"action":"task.created"}]`) {
		t.Errorf("log: %s", res.Raw)
	}
}

// A replayed idempotent mutation adds no event; a key reused for other
// arguments is refused and adds none either; a fresh key runs and adds one.
func TestAuditIdempotentReplayAddsNoEvent(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	alice := env.SignUp(t, "Alice")
	var w struct{ CreateWorkspace struct{ ID string } }
	res := env.Post(t, alice.Token, `mutation { createWorkspace(input: {name: "Acme"}) { id } }`, nil)
	if err := json.Unmarshal(res.Body.Data, &w); err != nil || res.Code() != "" {
		t.Fatalf("%s", res.Raw)
	}
	ws := w.CreateWorkspace.ID
	create := `mutation($ws: ID!, $name: String!, $key: String) { createProject(input: {workspaceId: $ws, name: $name}, idempotencyKey: $key) { id } }`
	vars := map[string]any{"ws": ws, "name": "Roadmap", "key": "audit-replay-1"}
	res, evs := auditActionCall(t, env, alice.Token, create, vars)
	var p struct{ CreateProject struct{ ID string } }
	if err := json.Unmarshal(res.Body.Data, &p); err != nil {
		t.Fatalf("%s", res.Raw)
	}
	auditOne(t, res, evs, "project.created", p.CreateProject.ID, &alice.ID, &ws)
	for range 2 {
		res, evs = auditActionCall(t, env, alice.Token, create, vars)
		if res.Code() != "" || res.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(res.Raw), p.CreateProject.ID) {
			t.Fatalf("replay: %s %v", res.Raw, res.Header)
		}
		if len(evs) != 0 {
			t.Fatalf("a replay wrote events: %+v", evs)
		}
	}
	res, evs = auditActionCall(t, env, alice.Token, create, map[string]any{"ws": ws, "name": "Other", "key": "audit-replay-1"})
	auditNone(t, "key reused with other arguments", res, evs, "IDEMPOTENCY_KEY_REUSED")
	res, evs = auditActionCall(t, env, alice.Token, create, map[string]any{"ws": ws, "name": "Other", "key": "audit-replay-2"})
	if len(evs) != 1 || res.Code() != "" {
		t.Fatalf("fresh key: %s, %d events", res.Raw, len(evs))
	}
	var n int
	if err := env.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE workspace_id = $1 AND action = 'project.created'`, ws).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d project.created events, %v", n, err)
	}
}
