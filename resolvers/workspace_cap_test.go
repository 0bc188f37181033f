package resolvers_test

import (
	"fmt"
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/store"
)

// Over GraphQL, an account at MaxWorkspacesPerUser gets extensions.code
// CONFLICT from createWorkspace and acceptInvitation, with a message that
// says why; a replay of the create that took the last place still answers
// with its workspace.
func TestWorkspaceCapOverGraphQL(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u, owner := env.NewUser(t, "U"), env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	inv := invite(t, env, owner, ws, u.Email, "MEMBER")
	// u is a MEMBER of all but one of the workspaces it may be in (in SQL: fast).
	if _, err := env.DB.Pool.Exec(t.Context(), `WITH w AS (INSERT INTO workspaces (name)
			SELECT 'filler ' || g FROM generate_series(1, $2::int) g RETURNING id)
		INSERT INTO members (workspace_id, user_id, role) SELECT id, $1, 'MEMBER' FROM w`,
		u.ID, store.MaxWorkspacesPerUser-1); err != nil {
		t.Fatal(err)
	}
	const create = `mutation($n: String!) { createWorkspace(input: {name: $n}) { id } }`
	first := post(t, env, u.Token, create, map[string]any{"n": "Last"}) // no key: see below
	var d struct{ CreateWorkspace struct{ ID string } }
	mustData(t, first, &d)
	keyed := env.Post(t, u.Token, create, map[string]any{"n": "Keyed"}, "Idempotency-Key", "k1")
	wantErrCode(t, keyed, "CONFLICT")
	msg, _ := keyed.Body.Errors[0]["message"].(string)
	if !strings.Contains(msg, fmt.Sprintf("belong to %d workspaces", store.MaxWorkspacesPerUser)) || !strings.Contains(msg, "leave one") {
		t.Errorf("createWorkspace at the cap: message %q", msg)
	}
	wantErrCode(t, post(t, env, u.Token, acceptMutation, map[string]any{"id": inv}), "CONFLICT")
	if roleOf(t, env, ws, u.ID) != "" || openInvitations(t, env, ws) != 1 {
		t.Fatal("the refused acceptance changed the membership or the invitation")
	}

	// The create that takes the last place, keyed, replays once at the cap.
	if _, err := env.DB.Pool.Exec(t.Context(), `DELETE FROM members WHERE workspace_id = $1`, d.CreateWorkspace.ID); err != nil {
		t.Fatal(err)
	}
	mustData(t, env.Post(t, u.Token, create, map[string]any{"n": "Keyed"}, "Idempotency-Key", "k2"), &d)
	replay := env.Post(t, u.Token, create, map[string]any{"n": "Keyed"}, "Idempotency-Key", "k2")
	var again struct{ CreateWorkspace struct{ ID string } }
	mustData(t, replay, &again)
	if replay.Header.Get("Idempotent-Replayed") != "true" || again.CreateWorkspace.ID != d.CreateWorkspace.ID {
		t.Fatalf("replay at the cap: %s", replay.Raw)
	}
	wantErrCode(t, post(t, env, u.Token, create, map[string]any{"n": "More"}), "CONFLICT")
}

// Over GraphQL, acceptInvitation into a workspace of MaxMembersPerWorkspace
// members is extensions.code CONFLICT with a message that says why, and
// changes nothing (the invitation stays open); inviting stays possible, and
// once a member is removed the acceptance works.
func TestMembersCapOverGraphQL(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner, u, v := env.NewUser(t, "Owner"), env.NewUser(t, "U"), env.NewUser(t, "V")
	ws := mkWorkspace(t, env, owner)
	inv := invite(t, env, owner, ws, u.Email, "MEMBER")
	// With the owner, the workspace is full (in SQL: fast).
	var filler string
	if err := env.DB.Pool.QueryRow(t.Context(), `WITH n AS (INSERT INTO users (email, name, password_hash)
			SELECT 'filler-' || g || '-' || gen_random_uuid() || '@example.com', 'Filler', 'x'
			FROM generate_series(1, $2::int) g RETURNING id),
		m AS (INSERT INTO members (workspace_id, user_id, role) SELECT $1, id, 'VIEWER' FROM n RETURNING user_id)
		SELECT min(user_id::text) FROM m`, ws, store.MaxMembersPerWorkspace-1).Scan(&filler); err != nil {
		t.Fatal(err)
	}
	refused := post(t, env, u.Token, acceptMutation, map[string]any{"id": inv})
	wantErrCode(t, refused, "CONFLICT")
	msg, _ := refused.Body.Errors[0]["message"].(string)
	if !strings.Contains(msg, fmt.Sprintf("has %d members", store.MaxMembersPerWorkspace)) || !strings.Contains(msg, "before anyone else joins") {
		t.Errorf("acceptInvitation at the cap: message %q", msg)
	}
	if roleOf(t, env, ws, u.ID) != "" || openInvitations(t, env, ws) != 1 {
		t.Fatal("the refused acceptance changed the membership or the invitation")
	}
	invite(t, env, owner, ws, v.Email, "VIEWER") // an invitation to a full workspace is made

	mustData(t, post(t, env, owner.Token, removeMemberMutation, map[string]any{"w": ws, "u": filler}), &struct{}{})
	var d struct{ AcceptInvitation struct{ ID string } }
	mustData(t, post(t, env, u.Token, acceptMutation, map[string]any{"id": inv}), &d)
	if d.AcceptInvitation.ID != ws || roleOf(t, env, ws, u.ID) != "MEMBER" {
		t.Fatalf("accept after a removal: %+v", d)
	}
}
