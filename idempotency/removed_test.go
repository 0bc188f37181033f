package idempotency_test

import (
	"encoding/json"
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
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

// A replay is served only to a caller who could read its result now, at the
// role the result needs: a membership and a workspace (acceptInvitation,
// updateMemberRole) to a member, an invitation (inviteMember) and a webhook
// endpoint, its secret or a delivery (createWebhookEndpoint,
// rotateWebhookSecret, updateWebhookEndpoint, redeliverWebhook) to an OWNER
// or ADMIN. An ADMIN demoted to MEMBER since the first call gets FORBIDDEN
// for the latter, and no secret; once removed, NOT_FOUND for all, and
// nothing of another user (the fields under a member or an invitation are
// read fresh).
func TestReplayAfterLosingTheRoleRevealsNothing(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner, admin, other := env.NewUser(t, "Own"), env.NewUser(t, "Adm"), env.NewUser(t, "Other")
	invitee := "invitee-of-a-replay@example.com"
	post := func(token, query string, vars map[string]any) map[string]any {
		t.Helper()
		r := env.Post(t, token, query, vars)
		if r.Code() != "" {
			t.Fatalf("%s: %s", query, r.Raw)
		}
		var data map[string]any
		if err := json.Unmarshal(r.Body.Data, &data); err != nil {
			t.Fatal(err)
		}
		return data
	}
	wsID := post(owner.Token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)["createWorkspace"].(map[string]any)["id"]
	if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`,
		wsID, other.ID); err != nil {
		t.Fatal(err)
	}
	invitation := post(owner.Token, `mutation($w: ID!, $e: String!) { inviteMember(workspaceId: $w, email: $e, role: VIEWER) { id } }`,
		map[string]any{"w": wsID, "e": admin.Email})["inviteMember"].(map[string]any)["id"]
	hook := post(owner.Token, `mutation($w: ID!) { createWebhookEndpoint(input: {workspaceId: $w, url: "https://203.0.113.10/hook"}) {
		endpoint { id } } }`, map[string]any{"w": wsID})["createWebhookEndpoint"].(map[string]any)["endpoint"].(map[string]any)["id"]
	post(owner.Token, `mutation($id: ID!) { pingWebhookEndpoint(id: $id) }`, map[string]any{"id": hook})
	storetest.DispatchAll(t, env.DB)
	var delivery string
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, hook).Scan(&delivery); err != nil {
		t.Fatal(err)
	}

	type call struct {
		name, query string
		vars        map[string]any
		admin       bool // the result needs OWNER or ADMIN
	}
	calls := []call{
		{"acceptInvitation", `mutation($id: ID!) { acceptInvitation(id: $id, idempotencyKey: "a1") { id name viewerRole } }`,
			map[string]any{"id": invitation}, false},
		{"updateMemberRole", `mutation($w: ID!, $u: ID!) { updateMemberRole(workspaceId: $w, userId: $u, role: VIEWER, idempotencyKey: "r1") {
			role user { name email } } }`, map[string]any{"w": wsID, "u": other.ID}, false},
		{"inviteMember", `mutation($w: ID!, $e: String!) { inviteMember(workspaceId: $w, email: $e, role: MEMBER, idempotencyKey: "i1") {
			id email invitedBy { name email } } }`, map[string]any{"w": wsID, "e": invitee}, true},
		{"createWebhookEndpoint", `mutation($w: ID!) { createWebhookEndpoint(input: {workspaceId: $w, url: "https://203.0.113.10/other"},
			idempotencyKey: "h1") { secret endpoint { id url } } }`, map[string]any{"w": wsID}, true},
		{"rotateWebhookSecret", `mutation($id: ID!) { rotateWebhookSecret(id: $id, idempotencyKey: "h2") { secret endpoint { id } } }`,
			map[string]any{"id": hook}, true},
		{"updateWebhookEndpoint", `mutation($id: ID!) { updateWebhookEndpoint(id: $id, input: {description: "CI"}, idempotencyKey: "h3") {
			id url description } }`, map[string]any{"id": hook}, true},
		{"redeliverWebhook", `mutation($id: ID!) { redeliverWebhook(deliveryId: $id, idempotencyKey: "h4") { id action payload } }`,
			map[string]any{"id": delivery}, true},
	}
	for i, c := range calls {
		if r := env.Post(t, admin.Token, c.query, c.vars); r.Code() != "" {
			t.Fatalf("%s: %s", c.name, r.Raw)
		}
		if i == 0 { // admin joined as VIEWER: an ADMIN for the rest
			if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE members SET role = 'ADMIN' WHERE workspace_id = $1 AND user_id = $2`,
				wsID, admin.ID); err != nil {
				t.Fatal(err)
			}
		}
		if r := env.Post(t, admin.Token, c.query, c.vars); r.Code() != "" || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s replayed to an ADMIN: %s", c.name, r.Raw)
		}
	}

	// Demoted to MEMBER: what a MEMBER reads is replayed, the rest is FORBIDDEN.
	post(owner.Token, `mutation($w: ID!, $u: ID!) { updateMemberRole(workspaceId: $w, userId: $u, role: MEMBER) { role } }`,
		map[string]any{"w": wsID, "u": admin.ID})
	for _, c := range calls {
		r := env.Post(t, admin.Token, c.query, c.vars)
		switch {
		case !c.admin && (r.Code() != "" || r.Header.Get("Idempotent-Replayed") != "true"):
			t.Errorf("%s replayed to the demoted ADMIN: %s, want the replay", c.name, r.Raw)
		case c.admin && (r.Code() != "FORBIDDEN" || strings.Contains(string(r.Raw), "whsec_") ||
			strings.Contains(string(r.Raw), invitee) || strings.Contains(string(r.Raw), "203.0.113.10")):
			t.Errorf("%s replayed to the demoted ADMIN: %s, want FORBIDDEN", c.name, r.Raw)
		}
	}

	// Removed: nothing is replayed, nothing of another user is read.
	post(owner.Token, `mutation($w: ID!, $u: ID!) { removeMember(workspaceId: $w, userId: $u) }`,
		map[string]any{"w": wsID, "u": admin.ID})
	for _, c := range calls {
		r := env.Post(t, admin.Token, c.query, c.vars)
		if r.Code() != "NOT_FOUND" || strings.Contains(string(r.Raw), other.Email) || strings.Contains(string(r.Raw), "whsec_") ||
			strings.Contains(string(r.Raw), invitee) {
			t.Errorf("%s replayed after removal: %s, want NOT_FOUND", c.name, r.Raw)
		}
	}
}

// A replayed workspace (createWorkspace, acceptInvitation) is the stored
// result, and its viewerRole is the caller's role now, as in every other read
// of the workspace: the role is the viewer's, not the result's. The id,
// name and createdAt stay those of the first answer.
func TestReplayedWorkspaceShowsPresentRole(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner, co, bob := env.SignUp(t, "own"), env.SignUp(t, "co"), env.SignUp(t, "bob")
	create := `mutation { createWorkspace(input: {name: "W"}, idempotencyKey: "w1") { id name createdAt viewerRole } }`
	first := ws(t, env.Post(t, co.Token, create, nil), "createWorkspace")
	wsID, _ := first["id"].(string)
	if first["viewerRole"] != "OWNER" {
		t.Fatalf("createWorkspace: %v", first)
	}
	// co makes owner an OWNER too and is made a VIEWER by them.
	if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`,
		wsID, owner.ID); err != nil {
		t.Fatal(err)
	}
	roleTo := func(u apitest.User, role string) {
		t.Helper()
		r := env.Post(t, owner.Token, `mutation($w: ID!, $u: ID!, $r: Role!) { updateMemberRole(workspaceId: $w, userId: $u, role: $r) { role } }`,
			map[string]any{"w": wsID, "u": u.ID, "r": role})
		if r.Code() != "" {
			t.Fatalf("updateMemberRole: %s", r.Raw)
		}
	}
	roleTo(co, "VIEWER")
	r := env.Post(t, co.Token, create, nil)
	again := ws(t, r, "createWorkspace")
	if r.Header.Get("Idempotent-Replayed") != "true" || again["id"] != wsID || again["name"] != first["name"] ||
		again["createdAt"] != first["createdAt"] || again["viewerRole"] != "VIEWER" {
		t.Errorf("createWorkspace replayed to a demoted OWNER: %v, want the first answer %v with viewerRole VIEWER", again, first)
	}

	// bob accepts as MEMBER, is made an ADMIN, and repeats the acceptance.
	inv := ws(t, env.Post(t, owner.Token, `mutation($w: ID!, $e: String!) { inviteMember(workspaceId: $w, email: $e, role: MEMBER) { id } }`,
		map[string]any{"w": wsID, "e": bob.Email}), "inviteMember")["id"]
	accept := `mutation($id: ID!) { acceptInvitation(id: $id, idempotencyKey: "a1") { id name viewerRole } }`
	if got := ws(t, env.Post(t, bob.Token, accept, map[string]any{"id": inv}), "acceptInvitation"); got["viewerRole"] != "MEMBER" {
		t.Fatalf("acceptInvitation: %v", got)
	}
	roleTo(bob, "ADMIN")
	r = env.Post(t, bob.Token, accept, map[string]any{"id": inv})
	if got := ws(t, r, "acceptInvitation"); r.Header.Get("Idempotent-Replayed") != "true" || got["id"] != wsID ||
		got["viewerRole"] != "ADMIN" {
		t.Errorf("acceptInvitation replayed to a promoted MEMBER: %v (%v), want viewerRole ADMIN", got, r.Header)
	}
}
