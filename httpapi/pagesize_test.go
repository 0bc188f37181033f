package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
)

// A connection's first out of 1..100 was refused only as its field ran
// (BAD_USER_INPUT, "first must be between 1 and 100"): the operation was
// charged its price and its other fields ran, a mutation's too (and a
// first of 100,000, its price saturated, was QUERY_TOO_COSTLY). It is now
// refused whole by the cost pass, before anything runs or is charged, with
// the field's message and code and no data, over POST, GET, an event stream
// and a WebSocket; a first in range, null, or on a field @skip leaves out
// still runs.
func TestFirstOutOfRangeIsRefusedBeforeTheCharge(t *testing.T) {
	t.Parallel()
	env, fx, budget := budgetedFixture(t)
	const (
		message = "first must be between 1 and 100"
		tasks   = `query($p: ID!, $n: Int) { me { id } project(id: $p) { tasks(first: $n) { nodes { id } } } }`
	)
	for _, c := range []struct {
		name, query string
		vars        map[string]any
	}{
		{"first: -1 beside another field", `query($p: ID!) { me { id } project(id: $p) { tasks(first: -1) { nodes { id } } } }`,
			map[string]any{"p": fx.project}},
		{"first: 0 in a variable", tasks, map[string]any{"p": fx.project, "n": 0}},
		{"first: 101 in a variable", tasks, map[string]any{"p": fx.project, "n": 101}},
		{"first: 100000", `query($p: ID!) { project(id: $p) { tasks(first: 100000) { nodes { id } } } }`,
			map[string]any{"p": fx.project}},
		{"a nested connection", `query($t: ID!) { task(id: $t) { title comments(first: 101) { nodes { id } } } }`,
			map[string]any{"t": fx.task}},
		{"in a fragment", `query($p: ID!) { project(id: $p) { name ...f } } fragment f on Project { tasks(first: 0) { nodes { id } } }`,
			map[string]any{"p": fx.project}},
		{"in a mutation's selection", `mutation($id: ID!) { updateTask(id: $id, input: {title: "ran"}) { id comments(first: -1) { nodes { id } } } }`,
			map[string]any{"id": fx.task}},
	} {
		refusedBeforeTheCharge(t, env, fx, budget, c.name, c.query, c.vars, message)
	}

	// Over GET, as application/graphql-response+json (400: refused
	// before it ran), an event stream (refused as a request: 400) and a
	// WebSocket (its next message) the same.
	before := budget()
	vars := map[string]any{"p": fx.project, "n": 101}
	r := get(t, env, tasks, vars, "Authorization", "Bearer "+fx.token)
	if msg, _ := errorAt(r, 0)["message"].(string); r.Status != http.StatusOK || r.Code() != "BAD_USER_INPUT" || msg != message ||
		(len(r.Body.Data) != 0 && string(r.Body.Data) != "null") {
		t.Errorf("over GET: %d %s", r.Status, r.Raw)
	}
	r = env.Post(t, fx.token, tasks, vars, "Accept", "application/graphql-response+json")
	if msg, _ := errorAt(r, 0)["message"].(string); r.Status != http.StatusBadRequest || r.Code() != "BAD_USER_INPUT" || msg != message {
		t.Errorf("asking for application/graphql-response+json: %d %s, want 400", r.Status, r.Raw)
	}
	r = env.Post(t, fx.token, tasks, vars, "Accept", "text/event-stream")
	if msg, _ := errorAt(r, 0)["message"].(string); r.Status != http.StatusBadRequest || r.Code() != "BAD_USER_INPUT" || msg != message {
		t.Errorf("over SSE: %d %s", r.Status, r.Raw)
	}
	ws := apitest.DialWS(t, env.Server.URL+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + fx.token}})
	ws.Subscribe("1", tasks, vars)
	if m := ws.Next(); m.Type != "next" || !strings.Contains(string(m.Payload), `"BAD_USER_INPUT"`) ||
		!strings.Contains(string(m.Payload), message) || strings.Contains(string(m.Payload), `"me"`) {
		t.Errorf("over a WebSocket: %s %s", m.Type, m.Payload)
	}
	if after := budget(); after != before {
		t.Errorf("over GET, SSE and a WebSocket: %d points left after them, %d before", after, before)
	}

	// In range, null (the default), or on a field left out: runs, charged.
	for _, c := range []struct {
		name, query string
		vars        map[string]any
	}{
		{"first: 1", tasks, map[string]any{"p": fx.project, "n": 1}},
		{"first: 100", tasks, map[string]any{"p": fx.project, "n": 100}},
		{"first: null", tasks, map[string]any{"p": fx.project, "n": nil}},
		{"first: 0 skipped", `query($p: ID!, $s: Boolean!) { project(id: $p) { name tasks(first: 0) @skip(if: $s) { nodes { id } } } }`,
			map[string]any{"p": fx.project, "s": true}},
		{"first: 0 in a fragment not included", `query($p: ID!) { project(id: $p) { name ...f @include(if: false) } } fragment f on Project { tasks(first: 0) { nodes { id } } }`,
			map[string]any{"p": fx.project}},
	} {
		before := budget()
		r := env.Post(t, fx.token, c.query, c.vars)
		if r.Status != http.StatusOK || r.Code() != "" || !strings.Contains(string(r.Body.Data), `"project"`) {
			t.Errorf("%s: %d %s, want it answered", c.name, r.Status, r.Raw)
		}
		if after := budget(); after >= before {
			t.Errorf("%s: %d points left, %d before: not charged", c.name, after, before)
		}
	}
}
