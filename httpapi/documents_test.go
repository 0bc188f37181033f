package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"taskflow/apq"
	"taskflow/httpapi/apitest"
)

// TestEveryValidationErrorIsShown checks that a document refused with
// several errors gets all of them, not only the first (gqlgen passes one
// error of an extension on).
func TestEveryValidationErrorIsShown(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	// 200: refusals are 200 for an application/json client (GraphQL over HTTP).
	r := env.Post(t, "", `{ nope1 nope2 me { nope3 } }`, nil)
	if r.Status != http.StatusOK || len(r.Body.Errors) != 3 || r.Code() != "GRAPHQL_VALIDATION_FAILED" {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	// A small document gets gqlparser's suggestions.
	r = env.Post(t, "", `{ mee { id } }`, nil)
	if msg, _ := r.Body.Errors[0]["message"].(string); !strings.Contains(msg, `Did you mean "me"?`) {
		t.Fatalf("%s", r.Raw)
	}
}

// TestDocumentLimitsAreRefusedWithTheirName sends the shapes of issue #13
// that used to take seconds of CPU (refused now by a limit before any
// validation rule runs) and one of each other limit.
func TestDocumentLimitsAreRefusedWithTheirName(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	var aliases strings.Builder
	for i := range 4900 {
		fmt.Fprintf(&aliases, " a%d: __typename", i)
	}
	var chain strings.Builder
	chain.WriteString("{ ...F0 }")
	for i := range 1500 {
		fmt.Fprintf(&chain, " fragment F%d on Query { __typename ...F%d }", i, i+1)
	}
	chain.WriteString(" fragment F1500 on Query { __typename }")
	cases := map[string]string{
		"selections": "# 1\n{" + strings.Repeat(" __typename", 14000) + " }",
		"aliases":    "{" + aliases.String() + " }",
		"walk":       chain.String(),
		"depth":      "{" + strings.Repeat(" me { workspaces { members { user {", 10) + " id" + strings.Repeat(" } } } }", 10) + " }",
		"directives": "{ __typename" + strings.Repeat(" @skip(if: false)", 11) + " }",
	}
	for limit, query := range cases {
		r := env.Post(t, "", query, nil)
		if r.Status != http.StatusOK || r.Code() != "QUERY_TOO_COSTLY" || len(r.Body.Errors) != 1 ||
			r.Body.Errors[0]["extensions"].(map[string]any)["limit"] != limit {
			t.Errorf("%s: %d %.300s", limit, r.Status, r.Raw)
		}
	}
}

// TestLongPersistedQueriesAreRunButNotStored checks that a text longer than
// apq.MaxQueryBytes is executed but not kept under its hash.
func TestLongPersistedQueriesAreRunButNotStored(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	long := "# " + strings.Repeat("x", apq.MaxQueryBytes) + "\n{ __typename }"
	h := sha(long)
	if r := postPQ(t, env, "", long, h, nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
		t.Fatalf("long text: %d %s", r.Status, r.Raw)
	}
	wantNotFound(t, postPQ(t, env, "", "", h, nil), http.StatusOK)
	short := "{ __typename }"
	if r := postPQ(t, env, "", short, sha(short), nil); r.Status != http.StatusOK {
		t.Fatalf("short text: %d %s", r.Status, r.Raw)
	}
	if r := postPQ(t, env, "", "", sha(short), nil); r.Status != http.StatusOK || len(r.Body.Errors) != 0 {
		t.Fatalf("short text by hash: %d %s", r.Status, r.Raw)
	}
}

// TestIncrementalDeliveryIsRefused checks that @defer and @stream are refused
// before anything runs, with the reason, and that introspection does not offer
// @defer: TaskFlow sends every response whole. A deferred fragment used to come
// back as nulls with "hasNext": true, and nothing after.
func TestIncrementalDeliveryIsRefused(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	alice := env.SignUp(t, "alice")
	cases := map[string]string{
		`{ me { id ... @defer { name } } }`:                                                  "@defer",
		`{ me { id ...F @defer(label: "f") } } fragment F on User { name }`:                  "@defer",
		`query($d: Boolean!) { me { id ... @defer(if: $d) { name } } }`:                      "@defer",
		`{ me { workspaces @stream(initialCount: 1) { id } } }`:                              "@stream",
		`mutation { createWorkspace(input: {name: "Deferred"}) { id ... @defer { name } } }`: "@defer",
	}
	for query, directive := range cases {
		r := env.Post(t, alice.Token, query, map[string]any{"d": true})
		if r.Status != http.StatusOK || r.Code() != "GRAPHQL_VALIDATION_FAILED" || len(r.Body.Errors) != 1 {
			t.Errorf("%s: %d %s", query, r.Status, r.Raw)
			continue
		}
		if msg, _ := r.Body.Errors[0]["message"].(string); !strings.HasPrefix(msg, "TaskFlow does not support "+directive+":") || r.Body.Data != nil ||
			strings.Contains(string(r.Raw), "hasNext") {
			t.Errorf("%s: %d %s", query, r.Status, r.Raw)
		}
	}
	r := env.Post(t, alice.Token, `{ me { workspaces { name } } }`, nil)
	if r.Code() != "" || strings.Contains(string(r.Raw), "Deferred") {
		t.Errorf("the refused mutation ran: %s", r.Raw)
	}
	r = env.Post(t, "", `{ __schema { directives { name } } }`, nil)
	if r.Code() != "" || !strings.Contains(string(r.Raw), `"include"`) || strings.Contains(string(r.Raw), `"defer"`) {
		t.Errorf("introspection: %s", r.Raw)
	}
	// Another unknown directive keeps gqlparser's message.
	r = env.Post(t, "", `{ __typename @later }`, nil)
	if len(r.Body.Errors) != 1 || r.Body.Errors[0]["message"] != `Unknown directive "@later".` {
		t.Errorf("unknown directive: %s", r.Raw)
	}
}
