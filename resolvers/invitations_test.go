package resolvers_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/store"
)

const (
	inviteMutation = `mutation($w: ID!, $e: String!, $r: Role!) { inviteMember(workspaceId: $w, email: $e, role: $r) {
		id email role workspaceId workspaceName invitedBy { id } createdAt expiresAt } }`
	acceptMutation    = `mutation($id: ID!) { acceptInvitation(id: $id) { id name viewerRole } }`
	declineMutation   = `mutation($id: ID!) { declineInvitation(id: $id) }`
	revokeMutation    = `mutation($id: ID!) { revokeInvitation(id: $id) }`
	addMemberMutation = `mutation($w: ID!, $e: String!, $r: Role!) { addMember(workspaceId: $w, email: $e, role: $r) { role user { id email } joinedAt } }`
	myInvitations     = `{ me { invitations { nodes { id email role workspaceId workspaceName invitedBy { id name workspaces { id } } } } } }`
	wsInvitations     = `query($w: ID!, $n: Int, $a: String) { workspace(id: $w) { id invitations(first: $n, after: $a) {
		nodes { id email role invitedBy { id } } pageInfo { hasNextPage endCursor } } } }`
)

// invitationNode is an Invitation as the queries above read it.
type invitationNode struct {
	ID, Email, Role, WorkspaceID, WorkspaceName string
	InvitedBy                                   *struct {
		ID, Name   string
		Workspaces []struct{ ID string }
	}
}

// myOpenInvitations returns u's invitations through me.invitations.
func myOpenInvitations(t *testing.T, env *apitest.Env, u apitest.User) []invitationNode {
	t.Helper()
	var d struct {
		Me struct {
			Invitations struct{ Nodes []invitationNode }
		}
	}
	mustData(t, post(t, env, u.Token, myInvitations, nil), &d)
	return d.Me.Invitations.Nodes
}

// workspaceInvitationIDs returns the ids of the workspace's open invitations
// as u sees them through workspace.invitations (first page of 100).
func workspaceInvitationIDs(t *testing.T, env *apitest.Env, u apitest.User, ws string) []string {
	t.Helper()
	var d struct {
		Workspace struct {
			Invitations struct{ Nodes []invitationNode }
		}
	}
	mustData(t, post(t, env, u.Token, wsInvitations, map[string]any{"w": ws, "n": 100}), &d)
	var ids []string
	for _, n := range d.Workspace.Invitations.Nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// openInvitations counts the invitation rows of a workspace straight from the database.
func openInvitations(t *testing.T, env *apitest.Env, ws string) int {
	t.Helper()
	var n int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM invitations WHERE workspace_id = $1`, ws).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventMetadata returns the metadata of the one event with this action and entity.
func eventMetadata(t *testing.T, env *apitest.Env, action, entityID string) (actorID string, meta map[string]any) {
	t.Helper()
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT actor_id::text, metadata FROM audit_events WHERE action = $1 AND entity_id = $2`,
		action, entityID).Scan(&actorID, &meta); err != nil {
		t.Fatalf("%s of %s: %v", action, entityID, err)
	}
	return actorID, meta
}

// wantOutsider fails unless u sees nothing of the workspace, its project and
// task, its members and its log.
func wantOutsider(t *testing.T, env *apitest.Env, u apitest.User, ws, project, task string) {
	t.Helper()
	for q, vars := range map[string]map[string]any{
		`query($id: ID!) { workspace(id: $id) { id } }`:                                                         {"id": ws},
		`query($id: ID!) { project(id: $id) { id } }`:                                                           {"id": project},
		`query($id: ID!) { task(id: $id) { id } }`:                                                              {"id": task},
		`query($id: ID!) { auditEvents(workspaceId: $id) { nodes { id } } }`:                                    {"id": ws},
		`query($id: ID!) { verifyAuditLog(workspaceId: $id) { valid } }`:                                        {"id": ws},
		`query($id: ID!) { searchTasks(workspaceId: $id, query: "secret") { nodes { id } } }`:                   {"id": ws},
		`mutation($id: ID!) { createProject(input: {workspaceId: $id, name: "x"}) { id } }`:                     {"id": ws},
		`mutation($id: ID!) { removeMember(workspaceId: $id, userId: "00000000-0000-0000-0000-000000000000") }`: {"id": ws},
	} {
		wantErrCode(t, post(t, env, u.Token, q, vars), "NOT_FOUND")
	}
	var d struct {
		Me struct{ Workspaces []struct{ ID string } }
	}
	mustData(t, post(t, env, u.Token, `{ me { workspaces { id } } }`, nil), &d)
	for _, w := range d.Me.Workspaces {
		if w.ID == ws {
			t.Fatal("the workspace is among the invitee's workspaces before they accepted")
		}
	}
	for _, inv := range myOpenInvitations(t, env, u) {
		if inv.InvitedBy != nil && len(inv.InvitedBy.Workspaces) != 0 {
			t.Fatalf("the inviter's workspaces are visible to the invitee: %+v", inv.InvitedBy.Workspaces)
		}
	}
}

// Until the invitee accepts, the workspace is invisible to them; they see the
// invitation, accept it and become a member with its role.
func TestInvitationNeedsConsent(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	bob := env.NewUser(t, "Bob")
	ws := mkWorkspace(t, env, owner)
	project := mkProject(t, env, owner, ws, "P")
	task := insertTask(t, env, project, "secret plan", "", store.TaskStatusTodo, owner)

	id := invite(t, env, owner, ws, bob.Email, "MEMBER")
	if roleOf(t, env, ws, bob.ID) != "" {
		t.Fatal("invited is not joined")
	}
	wantOutsider(t, env, bob, ws, project, task)

	// Bob sees the invitation, with the workspace's name and the inviter.
	mine := myOpenInvitations(t, env, bob)
	if len(mine) != 1 || mine[0].ID != id || mine[0].Email != bob.Email || mine[0].Role != "MEMBER" || mine[0].WorkspaceID != ws ||
		mine[0].WorkspaceName != "ws "+owner.Email || mine[0].InvitedBy == nil || mine[0].InvitedBy.ID != owner.ID {
		t.Fatalf("me.invitations = %+v", mine)
	}
	// The owner sees it among the workspace's; nobody else sees it as theirs.
	if got := workspaceInvitationIDs(t, env, owner, ws); !slices.Equal(got, []string{id}) {
		t.Fatalf("workspace.invitations = %v", got)
	}
	if got := myOpenInvitations(t, env, owner); len(got) != 0 {
		t.Fatalf("the owner's own invitations = %+v", got)
	}
	var d struct {
		AcceptInvitation struct{ ID, Name, ViewerRole string }
	}
	mustData(t, post(t, env, bob.Token, acceptMutation, map[string]any{"id": id}), &d)
	if d.AcceptInvitation.ID != ws || d.AcceptInvitation.ViewerRole != "MEMBER" || d.AcceptInvitation.Name != "ws "+owner.Email {
		t.Fatalf("acceptInvitation = %+v", d.AcceptInvitation)
	}
	if roleOf(t, env, ws, bob.ID) != "MEMBER" || openInvitations(t, env, ws) != 0 {
		t.Fatal("accepting did not make a member or left the invitation open")
	}
	if actor, _ := eventMetadata(t, env, "member.invited", id); actor != owner.ID {
		t.Fatalf("member.invited actor = %s", actor)
	}
	actor, meta := eventMetadata(t, env, "member.joined", bob.ID)
	if actor != bob.ID || meta["invitationId"] != id || meta["role"] != "MEMBER" || meta["userId"] != bob.ID ||
		meta["invitedById"] != owner.ID || meta["workspaceId"] != ws {
		t.Fatalf("member.joined by %s: %v", actor, meta)
	}
	// Now he sees the workspace, and the owner sees his (empty) invitations as
	// empty, not as an error.
	var w struct {
		Workspace struct {
			Members []struct {
				User struct {
					ID          string
					Invitations struct{ Nodes []struct{ ID string } }
				}
			}
		}
	}
	mustData(t, post(t, env, owner.Token, `query($w: ID!) { workspace(id: $w) { members { user { id invitations { nodes { id } } } } } }`,
		map[string]any{"w": ws}), &w)
	if len(w.Workspace.Members) != 2 {
		t.Fatalf("members = %+v", w.Workspace.Members)
	}
	for _, m := range w.Workspace.Members {
		if len(m.User.Invitations.Nodes) != 0 {
			t.Fatalf("invitations of %s as the owner sees them: %+v", m.User.ID, m.User.Invitations.Nodes)
		}
	}
	mustData(t, post(t, env, bob.Token, `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": task}), nil)
	if len(myOpenInvitations(t, env, bob)) != 0 || len(workspaceInvitationIDs(t, env, owner, ws)) != 0 {
		t.Fatal("an accepted invitation is still listed")
	}
	// It was answered: it is gone.
	before := workspaceEvents(t, env, ws)
	wantErrCode(t, post(t, env, bob.Token, acceptMutation, map[string]any{"id": id}), "NOT_FOUND")
	wantErrCode(t, post(t, env, bob.Token, declineMutation, map[string]any{"id": id}), "NOT_FOUND")
	if workspaceEvents(t, env, ws) != before {
		t.Fatal("answering an answered invitation left an event")
	}
}

// An invitation of an address without an account waits for it: whoever
// registers the address sees it (already in register's own answer) and may
// accept it.
func TestInvitationBeforeTheAccountExists(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	email := fmt.Sprintf("newcomer-%s@example.com", strings.ToLower(t.Name()))
	id := invite(t, env, owner, ws, strings.ToUpper(email), "VIEWER")

	var reg struct {
		Register struct {
			Token string
			User  struct {
				ID          string
				Invitations struct{ Nodes []invitationNode }
			}
		}
	}
	mustData(t, post(t, env, "", `mutation($in: RegisterInput!) { register(input: $in) { token user { id invitations { nodes { id email role } } } } }`,
		map[string]any{"in": map[string]any{"email": email, "password": "correct horse", "name": "Newcomer"}}), &reg)
	nodes := reg.Register.User.Invitations.Nodes
	if len(nodes) != 1 || nodes[0].ID != id || nodes[0].Email != email || nodes[0].Role != "VIEWER" {
		t.Fatalf("register's user.invitations = %+v", nodes)
	}
	newcomer := apitest.User{ID: reg.Register.User.ID, Email: email, Token: reg.Register.Token}
	mustData(t, post(t, env, newcomer.Token, acceptMutation, map[string]any{"id": id}), nil)
	if roleOf(t, env, ws, newcomer.ID) != "VIEWER" {
		t.Fatal("the newcomer did not join")
	}
}

// inviteStatements invites email to ws as owner and returns the answer without
// the invitation's own values, the event's metadata keys and the statements
// the request ran.
func inviteStatements(t *testing.T, env *apitest.Env, counter *statementCounter, owner apitest.User, ws, email string) (map[string]any, []string, []string) {
	t.Helper()
	counter.reset()
	res := post(t, env, owner.Token, inviteMutation, map[string]any{"w": ws, "e": email, "r": "MEMBER"})
	stmts := counter.statements()
	var d struct{ InviteMember map[string]any }
	mustData(t, res, &d)
	id, _ := d.InviteMember["id"].(string)
	for _, own := range []string{"id", "email", "createdAt", "expiresAt"} {
		if d.InviteMember[own] == nil {
			t.Fatalf("inviteMember has no %s: %s", own, res.Raw)
		}
		delete(d.InviteMember, own)
	}
	_, meta := eventMetadata(t, env, "member.invited", id)
	return d.InviteMember, slices.Sorted(maps.Keys(meta)), stmts
}

// Inviting an address that has an account and one that has none answer alike:
// the same shape and values, the same event metadata, and the very same
// statements (so no timing difference but that of one index probe, which
// bench/ measures). The deprecated addMember refuses both alike too.
func TestInviteAnswersAlikeWithOrWithoutAccount(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	owner := env.NewUser(t, "Owner")
	known := env.NewUser(t, "Known")
	ws := mkWorkspace(t, env, owner)
	unknown := "nobody-" + known.Email

	withAnswer, withMeta, withStmts := inviteStatements(t, env, counter, owner, ws, known.Email)
	withoutAnswer, withoutMeta, withoutStmts := inviteStatements(t, env, counter, owner, ws, unknown)
	if !maps.Equal(flat(withAnswer), flat(withoutAnswer)) {
		t.Errorf("answers differ: %v and %v", withAnswer, withoutAnswer)
	}
	if !slices.Equal(withMeta, withoutMeta) || slices.Contains(withMeta, "userId") {
		t.Errorf("member.invited metadata keys differ or name the account: %v and %v", withMeta, withoutMeta)
	}
	if !slices.Equal(withStmts, withoutStmts) {
		t.Errorf("statements differ:\n%s\n---\n%s", strings.Join(withStmts, "\n"), strings.Join(withoutStmts, "\n"))
	}

	other := env.NewUser(t, "Other")
	before := workspaceEvents(t, env, ws)
	var messages []string
	for _, e := range []string{other.Email, "nobody-" + other.Email} {
		res := post(t, env, owner.Token, addMemberMutation, map[string]any{"w": ws, "e": e, "r": "MEMBER"})
		wantErrCode(t, res, "FORBIDDEN")
		messages = append(messages, fmt.Sprint(res.Body.Errors[0]["message"]))
	}
	if messages[0] != messages[1] || !strings.Contains(messages[0], "inviteMember") {
		t.Errorf("addMember messages: %q", messages)
	}
	if roleOf(t, env, ws, other.ID) != "" || openInvitations(t, env, ws) != 2 || workspaceEvents(t, env, ws) != before {
		t.Error("addMember changed something")
	}
}

// flat returns m with its values as text, for comparing decoded JSON.
func flat(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		b, _ := json.Marshal(v)
		out[k] = string(b)
	}
	return out
}

// The deprecated addMember adds no one, for any role of the caller, and keeps
// its old answers where it refused before.
func TestAddMemberAddsNoOne(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, a := range roles {
		t.Run(a, func(t *testing.T) {
			t.Parallel()
			ws, actor, target := matrixWorkspace(t, env, a, "")
			before := workspaceEvents(t, env, ws)
			res := post(t, env, actor.Token, addMemberMutation, map[string]any{"w": ws, "e": target.Email, "r": "VIEWER"})
			wantErrCode(t, res, "FORBIDDEN")
			// The error, not extensions.deprecations (whose reason names
			// inviteMember to everyone, as the schema does), tells only an
			// OWNER or ADMIN to invite instead.
			errors, _ := json.Marshal(res.Body.Errors)
			if atLeastAdmin(a) != strings.Contains(string(errors), "inviteMember") {
				t.Errorf("%s: %s", a, res.Raw)
			}
			if roleOf(t, env, ws, target.ID) != "" || openInvitations(t, env, ws) != 0 || workspaceEvents(t, env, ws) != before {
				t.Fatal("addMember changed something")
			}
		})
	}
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	member := env.NewUser(t, "Member")
	joinWorkspace(t, env, owner, ws, member, "MEMBER")
	wantErrCode(t, post(t, env, owner.Token, addMemberMutation, map[string]any{"w": ws, "e": member.Email, "r": "VIEWER"}), "CONFLICT")
	wantErrCode(t, post(t, env, owner.Token, addMemberMutation, map[string]any{"w": ws, "e": "not an e-mail", "r": "VIEWER"}), "BAD_USER_INPUT")
	wantErrCode(t, post(t, env, member.Token, addMemberMutation, map[string]any{"w": "not-a-uuid", "e": member.Email, "r": "VIEWER"}), "NOT_FOUND")
	wantErrCode(t, post(t, env, "", addMemberMutation, map[string]any{"w": ws, "e": member.Email, "r": "VIEWER"}), "UNAUTHENTICATED")
}

// Who may do what with an invitation, and what a refusal leaves: nothing.
func TestInvitationErrors(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	admin := env.NewUser(t, "Admin")
	member := env.NewUser(t, "Member")
	bob := env.NewUser(t, "Bob")
	stranger := env.NewUser(t, "Stranger")
	ws := mkWorkspace(t, env, owner)
	joinWorkspace(t, env, owner, ws, admin, "ADMIN")
	joinWorkspace(t, env, owner, ws, member, "MEMBER")
	id := invite(t, env, owner, ws, bob.Email, "MEMBER")
	asOwner := invite(t, env, owner, ws, "future-owner-"+bob.Email, "OWNER")
	before := workspaceEvents(t, env, ws)

	// Inviting again while one is open, in any case: CONFLICT.
	wantErrCode(t, post(t, env, admin.Token, inviteMutation, map[string]any{"w": ws, "e": strings.ToUpper(bob.Email), "r": "VIEWER"}), "CONFLICT")
	// Only the invitee answers: an ADMIN who sees it is FORBIDDEN, anyone else
	// (a MEMBER, a stranger) is told it does not exist, like for a bad id.
	for _, m := range []string{acceptMutation, declineMutation} {
		wantErrCode(t, post(t, env, admin.Token, m, map[string]any{"id": id}), "FORBIDDEN")
		wantErrCode(t, post(t, env, owner.Token, m, map[string]any{"id": id}), "FORBIDDEN")
		for _, u := range []apitest.User{member, stranger} {
			wantErrCode(t, post(t, env, u.Token, m, map[string]any{"id": id}), "NOT_FOUND")
		}
		for _, bad := range []string{"not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
			wantErrCode(t, post(t, env, bob.Token, m, map[string]any{"id": bad}), "NOT_FOUND")
		}
		wantErrCode(t, post(t, env, "", m, map[string]any{"id": id}), "UNAUTHENTICATED")
	}
	// Only an OWNER or ADMIN revokes, only an OWNER an invitation as OWNER; the
	// invitee declines instead.
	wantErrCode(t, post(t, env, bob.Token, revokeMutation, map[string]any{"id": id}), "FORBIDDEN")
	wantErrCode(t, post(t, env, member.Token, revokeMutation, map[string]any{"id": id}), "NOT_FOUND")
	wantErrCode(t, post(t, env, stranger.Token, revokeMutation, map[string]any{"id": id}), "NOT_FOUND")
	wantErrCode(t, post(t, env, admin.Token, revokeMutation, map[string]any{"id": asOwner}), "FORBIDDEN")
	wantErrCode(t, post(t, env, "", revokeMutation, map[string]any{"id": id}), "UNAUTHENTICATED")
	// A MEMBER does not see the workspace's invitations: FORBIDDEN, and the
	// rest of the workspace still answers.
	res := post(t, env, member.Token, wsInvitations, map[string]any{"w": ws, "n": 10})
	wantErrCode(t, res, "FORBIDDEN")
	if !strings.Contains(string(res.Raw), `"workspace":{"id":"`+ws+`","invitations":null}`) {
		t.Fatalf("workspace.invitations for a MEMBER: %s", res.Raw)
	}
	if workspaceEvents(t, env, ws) != before || openInvitations(t, env, ws) != 2 || roleOf(t, env, ws, bob.ID) != "" {
		t.Fatal("a refused invitation change changed something")
	}
	if got := workspaceInvitationIDs(t, env, admin, ws); !slices.Equal(got, []string{asOwner, id}) {
		t.Fatalf("workspace.invitations as ADMIN = %v", got)
	}
	mustData(t, post(t, env, owner.Token, revokeMutation, map[string]any{"id": asOwner}), nil)
}

// Declining and revoking close the invitation, record who did it, and make no
// member.
func TestDeclineAndRevoke(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	admin := env.NewUser(t, "Admin")
	bob := env.NewUser(t, "Bob")
	ws := mkWorkspace(t, env, owner)
	joinWorkspace(t, env, owner, ws, admin, "ADMIN")

	declined := invite(t, env, admin, ws, bob.Email, "ADMIN")
	var d struct{ DeclineInvitation bool }
	mustData(t, post(t, env, bob.Token, declineMutation, map[string]any{"id": declined}), &d)
	if !d.DeclineInvitation || roleOf(t, env, ws, bob.ID) != "" || openInvitations(t, env, ws) != 0 {
		t.Fatal("declining did not close the invitation, or made a member")
	}
	if actor, meta := eventMetadata(t, env, "member.invitation_declined", declined); actor != bob.ID || meta["email"] != bob.Email || meta["role"] != "ADMIN" {
		t.Fatalf("member.invitation_declined by %s: %v", actor, meta)
	}

	// He may be invited again, and the invitation revoked.
	revoked := invite(t, env, owner, ws, bob.Email, "VIEWER")
	var r struct{ RevokeInvitation bool }
	mustData(t, post(t, env, admin.Token, revokeMutation, map[string]any{"id": revoked}), &r)
	if !r.RevokeInvitation || openInvitations(t, env, ws) != 0 || len(myOpenInvitations(t, env, bob)) != 0 {
		t.Fatal("revoking did not close the invitation")
	}
	if actor, meta := eventMetadata(t, env, "member.invitation_revoked", revoked); actor != admin.ID || meta["invitedById"] != owner.ID {
		t.Fatalf("member.invitation_revoked by %s: %v", actor, meta)
	}
	before := workspaceEvents(t, env, ws)
	wantErrCode(t, post(t, env, bob.Token, acceptMutation, map[string]any{"id": revoked}), "NOT_FOUND")
	wantErrCode(t, post(t, env, admin.Token, revokeMutation, map[string]any{"id": revoked}), "NOT_FOUND")
	if roleOf(t, env, ws, bob.ID) != "" || workspaceEvents(t, env, ws) != before {
		t.Fatal("a revoked invitation was accepted")
	}
	// The whole story is in the workspace's chain, which still verifies.
	res := post(t, env, owner.Token, `query($w: ID!) { verifyAuditLog(workspaceId: $w) { valid }
		auditEvents(workspaceId: $w, filter: {actions: ["member.*"]}) { nodes { action entityType } } }`, map[string]any{"w": ws})
	want := `[{"action":"member.invitation_revoked","entityType":"member"},{"action":"member.invited","entityType":"member"},` +
		`{"action":"member.invitation_declined","entityType":"member"},{"action":"member.invited","entityType":"member"},` +
		`{"action":"member.joined","entityType":"member"},{"action":"member.invited","entityType":"member"}]`
	if !strings.Contains(string(res.Raw), `"valid":true`) || !strings.Contains(string(res.Raw), want) {
		t.Fatalf("log: %s", res.Raw)
	}
}

// An expired invitation is listed nowhere, cannot be answered or revoked, and
// does not stop a new invitation of the same address.
func TestExpiredInvitation(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	bob := env.NewUser(t, "Bob")
	ws := mkWorkspace(t, env, owner)
	id := invite(t, env, owner, ws, bob.Email, "MEMBER")
	var expiresAt string
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT to_char(expires_at - created_at, 'DD HH24:MI') FROM invitations WHERE id = $1`, id).Scan(&expiresAt); err != nil {
		t.Fatal(err)
	}
	if expiresAt != "07 00:00" {
		t.Fatalf("an invitation lasts %s, want 7 days", expiresAt)
	}
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE invitations SET expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	before := workspaceEvents(t, env, ws)
	if len(myOpenInvitations(t, env, bob)) != 0 || len(workspaceInvitationIDs(t, env, owner, ws)) != 0 {
		t.Fatal("an expired invitation is listed")
	}
	for _, c := range []struct {
		u apitest.User
		m string
	}{{bob, acceptMutation}, {bob, declineMutation}, {owner, revokeMutation}} {
		res := post(t, env, c.u.Token, c.m, map[string]any{"id": id})
		wantErrCode(t, res, "CONFLICT")
		if !strings.Contains(string(res.Raw), "expired") {
			t.Fatalf("%s", res.Raw)
		}
	}
	if roleOf(t, env, ws, bob.ID) != "" || workspaceEvents(t, env, ws) != before {
		t.Fatal("an expired invitation changed something")
	}
	again := invite(t, env, owner, ws, bob.Email, "VIEWER")
	if openInvitations(t, env, ws) != 1 {
		t.Fatal("the expired invitation was not replaced")
	}
	mustData(t, post(t, env, bob.Token, acceptMutation, map[string]any{"id": again}), nil)
	if roleOf(t, env, ws, bob.ID) != "VIEWER" {
		t.Fatal("the new invitation was not accepted")
	}
}

// A workspace has at most store.MaxOpenInvitations open invitations; expired
// ones do not count and go when it invites again.
func TestOpenInvitationsAreBounded(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO invitations (workspace_id, email, role, invited_by, expires_at)
		SELECT $1, 'bulk-' || g || '@example.com', 'MEMBER', $2, now() + interval '1 day' FROM generate_series(1, $3::int) g`,
		ws, owner.ID, store.MaxOpenInvitations); err != nil {
		t.Fatal(err)
	}
	before := workspaceEvents(t, env, ws)
	wantErrCode(t, post(t, env, owner.Token, inviteMutation, map[string]any{"w": ws, "e": "one-more@example.com", "r": "MEMBER"}), "CONFLICT")
	if openInvitations(t, env, ws) != store.MaxOpenInvitations || workspaceEvents(t, env, ws) != before {
		t.Fatal("a refused invitation changed something")
	}
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE invitations SET expires_at = now() - interval '1 second'
		WHERE workspace_id = $1 AND email IN ('bulk-1@example.com', 'bulk-2@example.com')`, ws); err != nil {
		t.Fatal(err)
	}
	invite(t, env, owner, ws, "one-more@example.com", "MEMBER")
	if got := openInvitations(t, env, ws); got != store.MaxOpenInvitations-1 {
		t.Fatalf("%d invitations kept, want the %d open ones", got, store.MaxOpenInvitations-1)
	}
}

// workspace.invitations pages newest first; a cursor works only on its own list.
func TestWorkspaceInvitationPages(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	other := mkWorkspace(t, env, owner)
	var ids []string
	for i := range 5 {
		ids = append(ids, invite(t, env, owner, ws, fmt.Sprintf("page-%d@example.com", i), "MEMBER"))
	}
	slices.Reverse(ids)
	var got []string
	var after any
	for range 3 {
		var d struct {
			Workspace struct {
				Invitations struct {
					Nodes    []struct{ ID string }
					PageInfo struct {
						HasNextPage bool
						EndCursor   string
					}
				}
			}
		}
		mustData(t, post(t, env, owner.Token, wsInvitations, map[string]any{"w": ws, "n": 2, "a": after}), &d)
		for _, n := range d.Workspace.Invitations.Nodes {
			got = append(got, n.ID)
		}
		after = d.Workspace.Invitations.PageInfo.EndCursor
		if !d.Workspace.Invitations.PageInfo.HasNextPage {
			break
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("pages = %v, want %v", got, ids)
	}
	wantErrCode(t, post(t, env, owner.Token, wsInvitations, map[string]any{"w": other, "n": 2, "a": after}), "BAD_USER_INPUT")
	wantErrCode(t, post(t, env, owner.Token, wsInvitations, map[string]any{"w": ws, "n": 101}), "BAD_USER_INPUT")
}

// Retries with an idempotency key replay the first answer and record nothing more.
func TestInvitationMutationsReplay(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	bob := env.NewUser(t, "Bob")
	ws := mkWorkspace(t, env, owner)
	keyed := `mutation($w: ID!, $e: String!, $k: String) { inviteMember(workspaceId: $w, email: $e, role: MEMBER, idempotencyKey: $k) { id expiresAt } }`
	var first, again struct {
		InviteMember struct{ ID, ExpiresAt string }
	}
	vars := map[string]any{"w": ws, "e": bob.Email, "k": "invite-bob"}
	mustData(t, post(t, env, owner.Token, keyed, vars), &first)
	res := post(t, env, owner.Token, keyed, vars)
	mustData(t, res, &again)
	if again != first || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %+v (%v), first %+v", again, res.Header, first)
	}
	accept := `mutation($id: ID!, $k: String) { acceptInvitation(id: $id, idempotencyKey: $k) { id viewerRole } }`
	for range 2 {
		mustData(t, post(t, env, bob.Token, accept, map[string]any{"id": first.InviteMember.ID, "k": "accept"}), nil)
	}
	if countEvents(t, env, ws, "member.invited", first.InviteMember.ID) != 1 || countEvents(t, env, ws, "member.joined", bob.ID) != 1 {
		t.Fatal("a replay recorded an event")
	}
}

// An accept and a revoke of the same invitation at once: exactly one wins, and
// the outcome matches it.
func TestConcurrentAcceptAndRevoke(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	for i := range 6 {
		bob := env.NewUser(t, "Bob")
		id := invite(t, env, owner, ws, bob.Email, "MEMBER")
		codes := make([]string, 2)
		var wg sync.WaitGroup
		for j, c := range []struct {
			u apitest.User
			m string
		}{{bob, acceptMutation}, {owner, revokeMutation}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[j] = post(t, env, c.u.Token, c.m, map[string]any{"id": id}).Code()
			}()
		}
		wg.Wait()
		joined := roleOf(t, env, ws, bob.ID) == "MEMBER"
		accepted, revoked := codes[0] == "", codes[1] == ""
		if accepted == revoked || accepted != joined || codes[0]+codes[1] != "NOT_FOUND" {
			t.Fatalf("round %d: codes %q, joined %v", i, codes, joined)
		}
		if countEvents(t, env, ws, "member.joined", bob.ID)+countEvents(t, env, ws, "member.invitation_revoked", id) != 1 {
			t.Fatalf("round %d: not exactly one closing event", i)
		}
	}
}

// TestInvisibleCharactersInNewEmails registers and invites addresses that
// look like another one: a zero-width space, a bidirectional override, a
// byte-order mark, a soft hyphen, a trailing left-to-right mark or a
// no-break space in them. Each is BAD_USER_INPUT: such an account would show
// as ceo@… in member lists, invitations and the audit log.
func TestInvisibleCharactersInNewEmails(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	for _, trick := range []string{"ceo\u200b-%d@example.com", "ceo-%d\u202e@example.com", "\ufeffceo-%d@example.com",
		"c\u00adeo-%d@example.com", "ceo-%d@example.com\u200e", "ceo-%d\u00a0@example.com"} {
		email := fmt.Sprintf(trick, emailSeq.Add(1))
		r := post(t, env, "", registerMutation, map[string]any{"e": email, "p": "correct horse", "n": "Mallory"})
		if r.Code() != "BAD_USER_INPUT" {
			t.Errorf("register %q: %s", email, r.Raw)
		}
		wantErrCode(t, post(t, env, owner.Token, inviteMutation, map[string]any{"w": ws, "e": email, "r": "MEMBER"}), "BAD_USER_INPUT")
	}
}
