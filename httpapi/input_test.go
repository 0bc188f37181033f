package httpapi_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/uuid"

	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
)

// Headers that reach the database or the logs: a NUL in any header is refused
// by the HTTP server itself (400, before TaskFlow sees the request); invalid
// UTF-8 in the User-Agent is recorded cleaned (U+FFFD), not refused; an
// X-Request-ID that is not 1..128 printable ASCII is replaced by one the
// server makes; an Idempotency-Key that is not printable ASCII is
// BAD_USER_INPUT.
func TestHostileHeaders(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	fx := newFixture(t, env)
	addr := env.Server.Listener.Addr().String()
	create := []byte(`{"query":"mutation { createWorkspace(input: {name: \"h\"}) { id } }"}`)
	before := storetest.Snapshot(t, env.DB.Pool)
	for _, h := range []string{"User-Agent: a\x00b", "X-Request-ID: a\x00", "Idempotency-Key: a\x00", "X-Forwarded-For: 1.2.3.4\x00"} {
		if status, body, err := rawPost(addr, fx.token, create, h); err != nil || status != 400 {
			t.Errorf("%q: HTTP %d %s %v", h, status, body, err)
		}
	}
	status, body, err := rawPost(addr, fx.token, create, "Idempotency-Key: k\xff")
	if codes, _ := errorCodes(body); err != nil || status != 200 || !slices.Equal(codes, []string{"BAD_USER_INPUT"}) {
		t.Errorf("an Idempotency-Key with invalid UTF-8: HTTP %d %s %v", status, body, err)
	}
	storetest.AssertUnchanged(t, env.DB.Pool, before, "the refused headers")

	status, body, err = rawPost(addr, fx.token, create, "User-Agent: a\xffb\xc3", "X-Request-ID: r\xff")
	if codes, _ := errorCodes(body); err != nil || status != 200 || len(codes) > 0 {
		t.Fatalf("hostile User-Agent and X-Request-ID: HTTP %d %s %v", status, body, err)
	}
	var ua, rid string
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT user_agent, request_id FROM audit_events
		WHERE action = 'workspace.created'`).Scan(&ua, &rid); err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(rid); ua != "a\uFFFDb\uFFFD" || err != nil {
		t.Errorf("recorded user agent %q, request id %q", ua, rid)
	}
}

// errorCodes returns extensions.code of every error of a GraphQL body ("" for
// an error without one); false when the body is not JSON (an export's rows,
// net/http's own plain-text 400).
func errorCodes(body []byte) ([]string, bool) {
	var r struct {
		Errors []struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil, false
	}
	codes := make([]string, len(r.Errors))
	for i, e := range r.Errors {
		codes[i], _ = e.Extensions["code"].(string)
	}
	return codes, true
}

// An id in a form uuid.Parse reads but Postgres's uuid does not
// (urn:uuid:...) names nothing: NOT_FOUND, as any other malformed id, where it
// used to reach Postgres and come back INTERNAL.
func TestURNIDsAreNotFound(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	fx := newFixture(t, env)
	for _, q := range []string{
		`{ task(id: "urn:uuid:` + fx.task + `") { id } }`,
		`mutation { deleteComment(id: "urn:uuid:` + fx.comment + `") }`,
		`{ searchTasks(workspaceId: "urn:uuid:` + fx.workspace + `", query: "t") { nodes { id } } }`,
	} {
		if r := env.Post(t, fx.token, q, nil); r.Code() != "NOT_FOUND" {
			t.Errorf("%s: %s", q, r.Raw)
		}
	}
}
