package scaleout_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"taskflow/store/storetest"
)

// Bad input gets a clear client error, never a 5xx, and writes nothing:
// oversized bodies, deep queries, huge variables, invalid UTF-8, NUL
// characters (in any field of a multi-field mutation), a key shared by two
// fields. What the
// transport refuses is an HTTP 4xx; an argument refused by the domain during
// execution (a title too long) is BAD_USER_INPUT in an HTTP 200 answer, as
// GraphQL over HTTP has it for application/json.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	in := newInstance(t, "DATABASE_URL="+dbURL)
	in.start()
	_, token := newUser(t, pool, "ann")
	project := newProject(t, in, token)

	body := func(query string, vars map[string]any) []byte {
		b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	keyed := func(title any) map[string]any {
		return map[string]any{"in": map[string]any{"projectId": project, "title": title}, "key": "bad"}
	}
	deep := func(levels int) string { // project → workspace → project ... under a mutation
		var b strings.Builder
		b.WriteString(`mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id project { `)
		for range levels {
			b.WriteString(`workspace { projects(first: 100) { nodes { `)
		}
		b.WriteString(`id`)
		b.WriteString(strings.Repeat(` } } }`, levels))
		b.WriteString(` } } }`)
		return b.String()
	}
	aliases := func(n int) string {
		var b strings.Builder
		b.WriteString(`mutation($in: CreateTaskInput!) {`)
		for i := range n {
			fmt.Fprintf(&b, ` t%d: createTask(input: $in) { id }`, i)
		}
		b.WriteString(` }`)
		return b.String()
	}
	nested := any("x")
	for range 20000 {
		nested = []any{nested}
	}
	hugeList := make([]int, 100000)
	validBody := body(createTask, keyed("ok"))
	invalidUTF8 := bytes.Replace(validBody, []byte(`"ok"`), []byte("\"o\xffk\""), 1)
	// A NUL anywhere refuses the whole operation, before its first field runs.
	twoTasks := `mutation($in: CreateTaskInput!, $t: String!) { a: createTask(input: $in) { id }
		b: createTask(input: {projectId: "` + project + `", title: $t}) { id } }`

	cases := []struct {
		name        string
		contentType string
		body        []byte
		status      int    // 0: any 4xx
		code        string // "": any client error code
	}{
		{"oversized body", "application/json", body(createTask, keyed(strings.Repeat("a", 2<<20))), 413, ""},
		{"huge title under the body limit", "application/json", body(createTask, keyed(strings.Repeat("a", 900<<10))), 0, "BAD_USER_INPUT"},
		{"huge description", "application/json", body(createTask,
			map[string]any{"in": map[string]any{"projectId": project, "title": "t", "description": strings.Repeat("é", 200<<10)}, "key": "bad"}), 0, "BAD_USER_INPUT"},
		{"deeply nested variable", "application/json", body(createTask, keyed(nested)), 0, ""},
		{"a huge list for a string", "application/json", body(createTask, keyed(hugeList)), 0, ""},
		{"deep selection", "application/json", body(deep(200), keyed("deep")), 200, "QUERY_TOO_COSTLY"},
		{"deeper than the parser allows", "application/json", body(deep(3000), keyed("deep")), 200, ""},
		{"a thousand aliased mutations", "application/json", body(aliases(1000), keyed("alias")), 200, ""},
		{"invalid UTF-8", "application/json", invalidUTF8, 400, ""},
		{"a NUL in a variable", "application/json", body(createTask, keyed("o\x00k")), 200, "BAD_USER_INPUT"},
		{"a NUL in the second field", "application/json", body(twoTasks, map[string]any{"in": keyed("ok")["in"], "t": "\x00"}),
			200, "BAD_USER_INPUT"},
		{"a NUL in a literal", "application/json", body(`mutation { createWorkspace(input: {name: "\u0000"}) { id } }`, nil),
			200, "BAD_USER_INPUT"},
		{"one key for two fields", "application/json", body(`mutation($in: CreateTaskInput!) {
			a: createTask(input: $in, idempotencyKey: "bad") { id } b: createTask(input: $in, idempotencyKey: "bad") { id } }`,
			keyed("ok")), 200, "BAD_USER_INPUT"},
		{"invalid UTF-8 in the query", "application/json",
			bytes.Replace(validBody, []byte("createTask(input"), []byte("createTask\xc3(input"), 1), 400, ""},
		{"not JSON", "application/json", []byte(`{"query": "mutation {`), 400, ""},
		{"not an object", "application/json", []byte(`["mutation { createWorkspace(input: {name: \"x\"}) { id } }"]`), 400, ""},
		{"not JSON at all", "text/plain", []byte(`mutation { createWorkspace(input: {name: "x"}) { id } }`), 415, ""},
	}
	before := storetest.Snapshot(t, pool)
	for _, c := range cases {
		r, err := in.postRaw(token, c.contentType, c.body)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		code := r.code()
		switch {
		case r.Status >= 500:
			t.Errorf("%s: %s", c.name, r)
		case c.status != 0 && r.Status != c.status:
			t.Errorf("%s: status %d, want %d: %.300s", c.name, r.Status, c.status, r.Raw)
		case c.status == 0 && r.Status >= 300 && r.Status < 400:
			t.Errorf("%s: %s", c.name, r)
		case code == "" || code == "INTERNAL" || c.code != "" && code != c.code:
			t.Errorf("%s: code %q, want %q: %.300s", c.name, code, c.code, r.Raw)
		case len(r.Body.Data) > 0 && string(r.Body.Data) != "null":
			t.Errorf("%s: data %.200s", c.name, r.Body.Data)
		}
		t.Logf("%s: HTTP %d %s", c.name, r.Status, code)
	}
	storetest.AssertUnchanged(t, pool, before, "bad input")
	// The key "bad" was never used up: it still runs.
	if r := in.mustPost(t, token, createTask, keyed("good")); r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the key was used up by bad input: %s", r)
	}
}
