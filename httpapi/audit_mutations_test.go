package httpapi_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/schema"
	"taskflow/store/storetest"
)

// mutationFixture is what one row of mutationAudits runs against, made for
// that row alone: owner (signed up through register with fixturePassword)
// owns ws, member is a MEMBER of it and wrote comment and attached attachment
// on task in project; outsider is in no workspace; tag makes e-mail addresses
// unique.
type mutationFixture struct {
	owner, member, outsider                apitest.User
	ws, project, task, comment, attachment string
	// invitation is the owner's open invitation of outsider to ws.
	invitation string
	// webhook is an enabled webhook endpoint of ws with one delivery,
	// delivery; offWebhook a disabled one.
	webhook, offWebhook, delivery string
	tag                           string
}

// fixturePassword is the owner's password: no event may contain it.
const fixturePassword = "correct horse"

// idOf returns an id from the fixture and the mutation's response data.
type idOf func(f *mutationFixture, data map[string]any) string

// fixed returns the id pick chooses from the fixture.
func fixed(pick func(f *mutationFixture) string) idOf {
	return func(f *mutationFixture, _ map[string]any) string { return pick(f) }
}

// answered returns the id at path in the response data, e.g. ("createTask", "id").
func answered(path ...string) idOf {
	return func(_ *mutationFixture, data map[string]any) string {
		var v any = data
		for _, k := range path {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		s, _ := v.(string)
		return s
	}
}

// wantEvent is one audit event a mutation must write.
type wantEvent struct {
	action string
	// entity is the id the event is about.
	entity idOf
	// actor is who acted; nil means the caller, or the entity for an
	// anonymous call (register, login).
	actor idOf
	// workspace is the event's workspace; nil means none for an account
	// event (user.*) and the fixture's workspace for any other.
	workspace idOf
}

// mutationRow says how to call one mutation successfully and which audit
// events the call writes.
type mutationRow struct {
	// as picks the caller; nil calls anonymously.
	as    func(f *mutationFixture) apitest.User
	query string
	vars  func(f *mutationFixture) map[string]any
	// files are the files of a multipart call (nil: a JSON call).
	files func(f *mutationFixture) []apitest.File
	// events are the events of one call, in order; none means the mutation
	// deliberately writes none.
	events []wantEvent
	// refused, when set, is the code the call is answered with: it must write
	// no event (a deprecated mutation that no longer changes anything).
	refused string
}

// args returns the caller (anonymous: the zero User), the variables and the
// files (nil: a JSON call) of the row's call on f.
func (row mutationRow) args(f *mutationFixture) (caller apitest.User, vars map[string]any, files []apitest.File) {
	if row.as != nil {
		caller = row.as(f)
	}
	if row.vars != nil {
		vars = row.vars(f)
	}
	if row.files != nil {
		files = row.files(f)
	}
	return caller, vars, files
}

func owner(f *mutationFixture) apitest.User    { return f.owner }
func member(f *mutationFixture) apitest.User   { return f.member }
func outsider(f *mutationFixture) apitest.User { return f.outsider }

// invitationVars are the variables {id: the fixture's invitation}.
func invitationVars(f *mutationFixture) map[string]any { return map[string]any{"id": f.invitation} }

// webhookVars are the variables {id: the fixture's enabled webhook endpoint}.
func webhookVars(f *mutationFixture) map[string]any { return map[string]any{"id": f.webhook} }

// theWebhook is the fixture's enabled webhook endpoint.
func theWebhook(f *mutationFixture) string { return f.webhook }

// fixtureWebhookURL is a public address no test sends to (TEST-NET-3): the
// fixture runs no webhook worker.
const fixtureWebhookURL = "https://203.0.113.10/hook"

// mutationAudits has one row per field of the schema's Mutation type:
// TestEveryMutationWritesItsAuditEvents fails for a mutation without a row.
var mutationAudits = map[string]mutationRow{
	"register": {
		query:  `mutation($e: String!) { register(input: {email: $e, password: "new account pass", name: "New"}) { token user { id } } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"e": "new-" + f.tag + "@example.com"} },
		events: []wantEvent{{action: "user.registered", entity: answered("register", "user", "id")}},
	},
	"login": {
		query: `mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }`,
		vars: func(f *mutationFixture) map[string]any {
			return map[string]any{"e": f.owner.Email, "p": fixturePassword}
		},
		events: []wantEvent{{action: "user.logged_in", entity: fixed(func(f *mutationFixture) string { return f.owner.ID })}},
	},
	"logout": {
		as: owner, query: `mutation { logout }`,
		events: []wantEvent{{action: "user.logged_out", entity: fixed(func(f *mutationFixture) string { return f.owner.ID })}},
	},
	"createWorkspace": {
		as: owner, query: `mutation { createWorkspace(input: {name: "Another"}) { id } }`,
		events: []wantEvent{{action: "workspace.created", entity: answered("createWorkspace", "id"),
			workspace: answered("createWorkspace", "id")}},
	},
	"addMember": {
		as: owner, query: `mutation($ws: ID!, $e: String!) { addMember(workspaceId: $ws, email: $e, role: VIEWER) { role } }`,
		vars: func(f *mutationFixture) map[string]any {
			return map[string]any{"ws": f.ws, "e": "someone-" + f.tag + "@example.com"}
		},
		refused: "FORBIDDEN",
	},
	"inviteMember": {
		as: owner, query: `mutation($ws: ID!, $e: String!) { inviteMember(workspaceId: $ws, email: $e, role: VIEWER) { id } }`,
		vars: func(f *mutationFixture) map[string]any {
			return map[string]any{"ws": f.ws, "e": "invitee-" + f.tag + "@example.com"}
		},
		events: []wantEvent{{action: "member.invited", entity: answered("inviteMember", "id")}},
	},
	"revokeInvitation": {
		as: owner, query: `mutation($id: ID!) { revokeInvitation(id: $id) }`, vars: invitationVars,
		events: []wantEvent{{action: "member.invitation_revoked", entity: fixed(func(f *mutationFixture) string { return f.invitation })}},
	},
	"acceptInvitation": {
		as: outsider, query: `mutation($id: ID!) { acceptInvitation(id: $id) { id } }`, vars: invitationVars,
		events: []wantEvent{{action: "member.joined", entity: fixed(func(f *mutationFixture) string { return f.outsider.ID })}},
	},
	"declineInvitation": {
		as: outsider, query: `mutation($id: ID!) { declineInvitation(id: $id) }`, vars: invitationVars,
		events: []wantEvent{{action: "member.invitation_declined", entity: fixed(func(f *mutationFixture) string { return f.invitation })}},
	},
	"updateMemberRole": {
		as: owner, query: `mutation($ws: ID!, $u: ID!) { updateMemberRole(workspaceId: $ws, userId: $u, role: ADMIN) { role } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"ws": f.ws, "u": f.member.ID} },
		events: []wantEvent{{action: "member.role_changed", entity: fixed(func(f *mutationFixture) string { return f.member.ID })}},
	},
	"removeMember": {
		as: owner, query: `mutation($ws: ID!, $u: ID!) { removeMember(workspaceId: $ws, userId: $u) }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"ws": f.ws, "u": f.member.ID} },
		events: []wantEvent{{action: "member.removed", entity: fixed(func(f *mutationFixture) string { return f.member.ID })}},
	},
	"createProject": {
		as: member, query: `mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "Second"}) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"ws": f.ws} },
		events: []wantEvent{{action: "project.created", entity: answered("createProject", "id")}},
	},
	"updateProject": {
		as: member, query: `mutation($id: ID!) { updateProject(id: $id, input: {name: "Renamed"}) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.project} },
		events: []wantEvent{{action: "project.updated", entity: fixed(func(f *mutationFixture) string { return f.project })}},
	},
	"archiveProject": {
		as: owner, query: `mutation($id: ID!) { archiveProject(id: $id) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.project} },
		events: []wantEvent{{action: "project.archived", entity: fixed(func(f *mutationFixture) string { return f.project })}},
	},
	"createTask": {
		as: member, query: `mutation($p: ID!) { createTask(input: {projectId: $p, title: "Second"}) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"p": f.project} },
		events: []wantEvent{{action: "task.created", entity: answered("createTask", "id")}},
	},
	"updateTask": {
		as: member, query: `mutation($id: ID!) { updateTask(id: $id, input: {status: DONE}) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.task} },
		events: []wantEvent{{action: "task.updated", entity: fixed(func(f *mutationFixture) string { return f.task })}},
	},
	"deleteTask": {
		as: member, query: `mutation($id: ID!) { deleteTask(id: $id) }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.task} },
		events: []wantEvent{{action: "task.deleted", entity: fixed(func(f *mutationFixture) string { return f.task })}},
	},
	"addComment": {
		as: member, query: `mutation($t: ID!) { addComment(taskId: $t, body: "Second") { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"t": f.task} },
		events: []wantEvent{{action: "comment.created", entity: answered("addComment", "id")}},
	},
	"updateComment": {
		as: member, query: `mutation($id: ID!) { updateComment(id: $id, body: "Edited") { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.comment} },
		events: []wantEvent{{action: "comment.updated", entity: fixed(func(f *mutationFixture) string { return f.comment })}},
	},
	"createWebhookEndpoint": {
		as: owner, query: `mutation($ws: ID!, $u: String!) { createWebhookEndpoint(input: {workspaceId: $ws, url: $u, actions: ["task.*"]}) { endpoint { id } secret } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"ws": f.ws, "u": fixtureWebhookURL} },
		events: []wantEvent{{action: "webhook.created", entity: answered("createWebhookEndpoint", "endpoint", "id")}},
	},
	"updateWebhookEndpoint": {
		as: owner, query: `mutation($id: ID!) { updateWebhookEndpoint(id: $id, input: {description: "CI"}) { id } }`, vars: webhookVars,
		events: []wantEvent{{action: "webhook.updated", entity: fixed(theWebhook)}},
	},
	"enableWebhookEndpoint": {
		as: owner, query: `mutation($id: ID!) { enableWebhookEndpoint(id: $id) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.offWebhook} },
		events: []wantEvent{{action: "webhook.enabled", entity: fixed(func(f *mutationFixture) string { return f.offWebhook })}},
	},
	"disableWebhookEndpoint": {
		as: owner, query: `mutation($id: ID!) { disableWebhookEndpoint(id: $id, reason: "maintenance") { id } }`, vars: webhookVars,
		events: []wantEvent{{action: "webhook.disabled", entity: fixed(theWebhook)}},
	},
	"deleteWebhookEndpoint": {
		as: owner, query: `mutation($id: ID!) { deleteWebhookEndpoint(id: $id) }`, vars: webhookVars,
		events: []wantEvent{{action: "webhook.deleted", entity: fixed(theWebhook)}},
	},
	"rotateWebhookSecret": {
		as: owner, query: `mutation($id: ID!) { rotateWebhookSecret(id: $id) { endpoint { id } secret } }`, vars: webhookVars,
		events: []wantEvent{{action: "webhook.secret_rotated", entity: fixed(theWebhook)}},
	},
	"pingWebhookEndpoint": {
		as: owner, query: `mutation($id: ID!) { pingWebhookEndpoint(id: $id) }`, vars: webhookVars,
		events: []wantEvent{{action: "webhook.pinged", entity: fixed(theWebhook)}},
	},
	"startAuditExport": {
		as: owner, query: `mutation($ws: ID!) { startAuditExport(input: {workspaceId: $ws, format: CSV, filter: {actions: ["task.*"]}}) { id } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"ws": f.ws} },
		events: []wantEvent{{action: "audit.export_started", entity: answered("startAuditExport", "id")}},
	},
	"redeliverWebhook": {
		as: owner, query: `mutation($id: ID!) { redeliverWebhook(deliveryId: $id) { id status } }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.delivery} },
		events: []wantEvent{{action: "webhook.redelivered", entity: fixed(theWebhook)}},
	},
	"deleteComment": {
		as: member, query: `mutation($id: ID!) { deleteComment(id: $id) }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.comment} },
		events: []wantEvent{{action: "comment.deleted", entity: fixed(func(f *mutationFixture) string { return f.comment })}},
	},
	"addAttachment": {
		as: member, query: `mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id } }`,
		vars: func(f *mutationFixture) map[string]any { return map[string]any{"t": f.task, "f": nil} },
		files: func(f *mutationFixture) []apitest.File {
			return []apitest.File{apitest.BytesFile("f", "second.txt", []byte("second"))}
		},
		events: []wantEvent{{action: "attachment.added", entity: answered("addAttachment", "id")}},
	},
	"deleteAttachment": {
		as: member, query: `mutation($id: ID!) { deleteAttachment(id: $id) }`,
		vars:   func(f *mutationFixture) map[string]any { return map[string]any{"id": f.attachment} },
		events: []wantEvent{{action: "attachment.deleted", entity: fixed(func(f *mutationFixture) string { return f.attachment })}},
	},
}

// newMutationFixture makes a row's fixture through the API.
func newMutationFixture(t *testing.T, env *apitest.Env) *mutationFixture {
	t.Helper()
	f := &mutationFixture{owner: env.SignUp(t, "Owner"), member: env.NewUser(t, "Member"), outsider: env.NewUser(t, "Outsider"),
		tag: fmt.Sprint(auditRequestSeq.Add(1))}
	id := func(token, query string, vars map[string]any, path ...string) string {
		t.Helper()
		res := env.Post(t, token, query, vars)
		var data map[string]any
		if err := json.Unmarshal(res.Body.Data, &data); err != nil || res.Code() != "" {
			t.Fatalf("fixture: %s", res.Raw)
		}
		return answered(path...)(f, data)
	}
	f.ws = id(f.owner.Token, `mutation { createWorkspace(input: {name: "Acme"}) { id } }`, nil, "createWorkspace", "id")
	joining := id(f.owner.Token, `mutation($ws: ID!, $e: String!) { inviteMember(workspaceId: $ws, email: $e, role: MEMBER) { id } }`,
		map[string]any{"ws": f.ws, "e": f.member.Email}, "inviteMember", "id")
	id(f.member.Token, `mutation($id: ID!) { acceptInvitation(id: $id) { id } }`, map[string]any{"id": joining})
	f.invitation = id(f.owner.Token, `mutation($ws: ID!, $e: String!) { inviteMember(workspaceId: $ws, email: $e, role: VIEWER) { id } }`,
		map[string]any{"ws": f.ws, "e": f.outsider.Email}, "inviteMember", "id")
	f.project = id(f.member.Token, `mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "P"}) { id } }`,
		map[string]any{"ws": f.ws}, "createProject", "id")
	f.task = id(f.member.Token, `mutation($p: ID!) { createTask(input: {projectId: $p, title: "T"}) { id } }`,
		map[string]any{"p": f.project}, "createTask", "id")
	f.comment = id(f.member.Token, `mutation($t: ID!) { addComment(taskId: $t, body: "C") { id } }`,
		map[string]any{"t": f.task}, "addComment", "id")
	res := env.Upload(t, f.member.Token, `mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id } }`,
		map[string]any{"t": f.task, "f": nil}, []apitest.File{apitest.BytesFile("f", "first.txt", []byte("first"))})
	var data map[string]any
	if err := json.Unmarshal(res.Body.Data, &data); err != nil || res.Code() != "" {
		t.Fatalf("fixture: %s", res.Raw)
	}
	f.attachment = answered("addAttachment", "id")(f, data)
	hook := `mutation($ws: ID!, $u: String!) { createWebhookEndpoint(input: {workspaceId: $ws, url: $u}) { endpoint { id } } }`
	hookVars := map[string]any{"ws": f.ws, "u": fixtureWebhookURL}
	f.webhook = id(f.owner.Token, hook, hookVars, "createWebhookEndpoint", "endpoint", "id")
	f.offWebhook = id(f.owner.Token, hook, hookVars, "createWebhookEndpoint", "endpoint", "id")
	id(f.owner.Token, `mutation($id: ID!) { disableWebhookEndpoint(id: $id) { id } }`, map[string]any{"id": f.offWebhook}, "disableWebhookEndpoint", "id")
	id(f.owner.Token, `mutation($id: ID!) { pingWebhookEndpoint(id: $id) }`, map[string]any{"id": f.webhook})
	storetest.DispatchAll(t, env.DB)
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, f.webhook).Scan(&f.delivery); err != nil {
		t.Fatalf("fixture: the ping's delivery: %v", err)
	}
	return f
}

// secretKey matches metadata keys that would hold a secret.
var secretKey = regexp.MustCompile(`(?i)password|token|hash|secret|salt|argon`)

// Every mutation of the schema writes exactly the audit events of its row (in
// order, with action, entity type and id, actor, workspace and the request's
// context) and no secret in their metadata: no key named like one (but a
// true/false flag), no password, no token the call sent or received, no
// password hash.
func TestEveryMutationWritesItsAuditEvents(t *testing.T) {
	t.Parallel()
	s, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, f := range s.Mutation.Fields {
		if !strings.HasPrefix(f.Name, "__") {
			fields = append(fields, f.Name)
		}
	}
	for name := range mutationAudits {
		if !slices.Contains(fields, name) {
			t.Errorf("mutationAudits has a row for %s, which the schema does not have", name)
		}
	}
	env := apitest.New(t)
	for _, name := range fields {
		row, ok := mutationAudits[name]
		if !ok {
			t.Errorf("Mutation.%s has no row in mutationAudits: add one with the audit events it writes (or none)", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newMutationFixture(t, env)
			caller, vars, files := row.args(f)
			res, evs := auditActionCall(t, env, caller.Token, row.query, vars, files...)
			if row.refused != "" {
				if res.Code() != row.refused || len(evs) != 0 {
					t.Fatalf("%s: want %s and no event, got %d events: %s", name, row.refused, len(evs), res.Raw)
				}
				return
			}
			var data map[string]any
			if err := json.Unmarshal(res.Body.Data, &data); err != nil || res.Code() != "" {
				t.Fatalf("%s: %s", name, res.Raw)
			}
			if len(evs) != len(row.events) {
				t.Fatalf("%s wrote %d events, want %d: %+v", name, len(evs), len(row.events), evs)
			}
			secrets := []string{fixturePassword, "new account pass", "$argon2id$"}
			if caller.Token != "" {
				secrets = append(secrets, caller.Token)
			}
			secrets = append(secrets, regexp.MustCompile(`"token":"([^"]+)"`).FindAllString(string(res.Body.Data), -1)...)
			for i, w := range row.events {
				checkAuditEvent(t, f, data, caller, w, evs[i], secrets)
			}
		})
	}
}

// checkAuditEvent compares one written event with the wanted one.
func checkAuditEvent(t *testing.T, f *mutationFixture, data map[string]any, caller apitest.User, w wantEvent, e auditLoggedEvent, secrets []string) {
	t.Helper()
	entity := w.entity(f, data)
	actor := caller.ID
	if w.actor != nil {
		actor = w.actor(f, data)
	} else if actor == "" {
		actor = entity
	}
	workspace := "<nil>"
	switch {
	case w.workspace != nil:
		workspace = w.workspace(f, data)
	case !strings.HasPrefix(w.action, "user."):
		workspace = f.ws
	}
	entityType, _, _ := strings.Cut(w.action, ".")
	if e.Action != w.action || e.EntityType != entityType || entity == "" || e.EntityID != entity ||
		auditDeref(e.ActorID) != actor || auditDeref(e.WorkspaceID) != workspace {
		t.Errorf("event %s %s %s by %s in %s, want %s %s %s by %s in %s", e.Action, e.EntityType, e.EntityID,
			auditDeref(e.ActorID), auditDeref(e.WorkspaceID), w.action, entityType, entity, actor, workspace)
	}
	for k, v := range e.Metadata {
		if _, flag := v.(bool); secretKey.MatchString(k) && !flag { // a flag such as passwordRehashed holds no secret
			t.Errorf("%s metadata has a key %q: %s", e.Action, k, e.raw)
		}
	}
	for _, s := range secrets {
		if strings.Contains(e.raw, strings.TrimSuffix(strings.TrimPrefix(s, `"token":"`), `"`)) {
			t.Errorf("%s metadata holds a secret: %s", e.Action, e.raw)
		}
	}
}
