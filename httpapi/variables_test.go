package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
)

// A variable's value that gqlparser's coercion accepts and gqlgen's
// generated code refuses (an enum value in another case, a Time that is not
// RFC 3339, an Upload that is not a file part) was refused only as its
// field ran: the operation's price was charged, and its other fields ran.
// It is now refused before anything runs or is charged, with the message
// and code the field gave (BAD_USER_INPUT), and no data; a valid value
// still runs.
func TestInvalidVariablesAreRefusedBeforeTheCharge(t *testing.T) {
	t.Parallel()
	env, fx, budget := budgetedFixture(t)
	const (
		tasks  = `query($p: ID!, $s: TaskStatus) { project(id: $p) { tasks(status: $s) { nodes { id } } } }`
		update = `mutation($id: ID!, $in: UpdateTaskInput!) { other: updateTask(id: $id, input: {title: "ran"}) { id } updateTask(id: $id, input: $in) { id } }`
		due    = `mutation($id: ID!, $d: Time) { updateTask(id: $id, input: {dueDate: $d}) { id } }`
		audit  = `query($ws: ID!, $f: AuditEventFilter) { auditEvents(workspaceId: $ws, filter: $f) { nodes { id } } }`
		attach = `mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id } }`
	)
	for _, c := range []struct {
		name, query string
		vars        map[string]any
		message     string
	}{
		{"an enum value in lower case", tasks, map[string]any{"p": fx.project, "s": "todo"},
			`"todo" is not a valid TaskStatus`},
		{"an enum value in an input object", update, map[string]any{"id": fx.task, "in": map[string]any{"status": "Done"}},
			`"Done" is not a valid TaskStatus`},
		{"an enum value in another input field", update, map[string]any{"id": fx.task, "in": map[string]any{"priority": "high"}},
			`"high" is not a valid TaskPriority`},
		{"a Time that is not RFC 3339", due, map[string]any{"id": fx.task, "d": "tomorrow"},
			"time should be RFC3339Nano formatted string"},
		{"a Time that is a number", due, map[string]any{"id": fx.task, "d": 1733400000},
			"time should be RFC3339Nano formatted string"},
		{"a Time in an input object", audit, map[string]any{"ws": fx.workspace, "f": map[string]any{"since": "yesterday"}},
			"time should be RFC3339Nano formatted string"},
		{"a Time literal", `mutation($id: ID!) { updateTask(id: $id, input: {dueDate: "tomorrow"}) { id } }`,
			map[string]any{"id": fx.task}, "time should be RFC3339Nano formatted string"},
		{"an Upload literal", `mutation($t: ID!) { addAttachment(taskId: $t, file: "file.txt") { id } }`,
			map[string]any{"t": fx.task}, "an Upload is a file sent as a part of a multipart/form-data request " +
				"(the GraphQL multipart request specification), with null in its place in the variables"},
		{"an Upload in the variables", attach, map[string]any{"t": fx.task, "f": "file.txt"},
			"an Upload is a file sent as a part of a multipart/form-data request " +
				"(the GraphQL multipart request specification), with null in its place in the variables"},
	} {
		refusedBeforeTheCharge(t, env, fx, budget, c.name, c.query, c.vars, c.message)
	}

	// Over an event stream (refused as a request: 400) and a WebSocket
	// (its next message) the same.
	before := budget()
	r := env.Post(t, fx.token, tasks, map[string]any{"p": fx.project, "s": "todo"}, "Accept", "text/event-stream")
	if msg, _ := errorAt(r, 0)["message"].(string); r.Status != http.StatusBadRequest || r.Code() != "BAD_USER_INPUT" ||
		msg != `"todo" is not a valid TaskStatus` {
		t.Errorf("over SSE: %d %s", r.Status, r.Raw)
	}
	ws := apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + fx.token}})
	ws.Subscribe("1", tasks, map[string]any{"p": fx.project, "s": "todo"})
	if m := ws.Next(); m.Type != "next" || !strings.Contains(string(m.Payload), `"BAD_USER_INPUT"`) ||
		!strings.Contains(string(m.Payload), `is not a valid TaskStatus`) || strings.Contains(string(m.Payload), `"project"`) {
		t.Errorf("over a WebSocket: %s %s", m.Type, m.Payload)
	}
	if after := budget(); after != before {
		t.Errorf("over SSE and a WebSocket: %d points left after them, %d before", after, before)
	}

	// Valid values run, and are charged.
	before = budget()
	r = env.Post(t, fx.token, tasks, map[string]any{"p": fx.project, "s": "TODO"})
	if r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("a valid enum value: %d %s", r.Status, r.Raw)
	}
	r = env.Post(t, fx.token, due, map[string]any{"id": fx.task, "d": "2026-12-24T10:00:00Z"})
	if r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("a valid Time: %d %s", r.Status, r.Raw)
	}
	if after := budget(); after >= before {
		t.Errorf("valid operations: %d points left, %d before: not charged", after, before)
	}
}

// budgetedFixture is an API with dayLimiter's budget, a fixture in its
// database, and budget, which reads what is left of the fixture's owner's.
func budgetedFixture(t *testing.T) (env *apitest.Env, fx fixture, budget func() int) {
	t.Helper()
	lim := dayLimiter(t, 0)
	env = apitest.New(t, func(o *httpapi.Options) { o.Limiter = lim })
	fx = newFixture(t, env)
	return env, fx, func() int {
		t.Helper()
		return lim.Afford(t.Context(), fx.owner, 0).Budget.Remaining
	}
}

// refusedBeforeTheCharge posts query with vars as fx's owner, and checks
// that it is refused whole before anything runs: one error, BAD_USER_INPUT
// with message, no data, nothing charged of budget, no row changed.
func refusedBeforeTheCharge(t *testing.T, env *apitest.Env, fx fixture, budget func() int, name, query string, vars map[string]any, message string) {
	t.Helper()
	before, rows := budget(), storetest.Snapshot(t, env.DB.Pool)
	r := env.Post(t, fx.token, query, vars)
	msg, _ := errorAt(r, 0)["message"].(string)
	if r.Status != http.StatusOK || r.Code() != "BAD_USER_INPUT" || msg != message || len(r.Body.Errors) != 1 {
		t.Errorf("%s: %d %s, want BAD_USER_INPUT %q", name, r.Status, r.Raw, message)
	}
	if len(r.Body.Data) != 0 && string(r.Body.Data) != "null" {
		t.Errorf("%s: data %s, want none: nothing runs", name, r.Body.Data)
	}
	if after := budget(); after != before {
		t.Errorf("%s: %d points left after it, %d before: charged %d", name, after, before, before-after)
	}
	storetest.AssertUnchanged(t, env.DB.Pool, rows, name)
}

// errorAt returns the i-th error of r's body, or nil.
func errorAt(r *apitest.Response, i int) map[string]any {
	if i >= len(r.Body.Errors) {
		return nil
	}
	return r.Body.Errors[i]
}
