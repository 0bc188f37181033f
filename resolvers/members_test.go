package resolvers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"taskflow/httpapi/apitest"
	"taskflow/store"
)

var roles = []string{"OWNER", "ADMIN", "MEMBER", "VIEWER"}

func atLeastAdmin(r string) bool { return r == "OWNER" || r == "ADMIN" }

const (
	updateRoleMutation   = `mutation($w: ID!, $u: ID!, $r: Role!) { updateMemberRole(workspaceId: $w, userId: $u, role: $r) { role user { id } } }`
	removeMemberMutation = `mutation($w: ID!, $u: ID!) { removeMember(workspaceId: $w, userId: $u) }`
)

// matrixWorkspace makes (straight in SQL, to keep the role matrix fast) a
// workspace owned by a fresh owner, with a fresh actor of role actorRole and (if
// targetRole != "") a fresh target of targetRole.
func matrixWorkspace(t *testing.T, env *apitest.Env, actorRole, targetRole string) (ws string, actor, target apitest.User) {
	t.Helper()
	ctx := context.Background()
	owner := env.NewUser(t, "Owner")
	actor = env.NewUser(t, "Actor")
	target = env.NewUser(t, "Target")
	if err := env.DB.Pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('matrix') RETURNING id`).Scan(&ws); err != nil {
		t.Fatal(err)
	}
	add := func(u apitest.User, role string) {
		if _, err := env.DB.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role, joined_at) VALUES ($1, $2, $3, clock_timestamp())`,
			ws, u.ID, role); err != nil {
			t.Fatal(err)
		}
	}
	add(owner, "OWNER")
	add(actor, actorRole)
	if targetRole != "" {
		add(target, targetRole)
	}
	return ws, actor, target
}

func TestInviteMemberRoleRules(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, a := range roles {
		for _, r := range roles {
			t.Run(a+" invites "+r, func(t *testing.T) {
				t.Parallel()
				ws, actor, target := matrixWorkspace(t, env, a, "")
				before := workspaceEvents(t, env, ws)
				res := post(t, env, actor.Token, inviteMutation, map[string]any{"w": ws, "e": strings.ToUpper(target.Email), "r": r})
				allowed := atLeastAdmin(a) && (r != "OWNER" || a == "OWNER")
				if !allowed {
					wantErrCode(t, res, "FORBIDDEN")
					if openInvitations(t, env, ws) != 0 || workspaceEvents(t, env, ws) != before {
						t.Fatal("a refused inviteMember changed something")
					}
					return
				}
				var d struct {
					InviteMember struct{ ID, Email, Role, WorkspaceID string }
				}
				mustData(t, res, &d)
				if d.InviteMember.Role != r || d.InviteMember.Email != target.Email || d.InviteMember.WorkspaceID != ws {
					t.Fatalf("inviteMember = %+v", d.InviteMember)
				}
				if openInvitations(t, env, ws) != 1 || countEvents(t, env, ws, "member.invited", d.InviteMember.ID) != 1 {
					t.Fatal("invitation or member.invited event missing")
				}
				if roleOf(t, env, ws, target.ID) != "" {
					t.Fatal("an invitation made the invitee a member before they accepted")
				}
			})
		}
	}
}

func TestUpdateMemberRoleRules(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, a := range roles {
		for _, from := range roles {
			for _, to := range roles {
				t.Run(fmt.Sprintf("%s sets %s to %s", a, from, to), func(t *testing.T) {
					t.Parallel()
					ws, actor, target := matrixWorkspace(t, env, a, from)
					before := workspaceEvents(t, env, ws)
					res := post(t, env, actor.Token, updateRoleMutation, map[string]any{"w": ws, "u": target.ID, "r": to})
					allowed := atLeastAdmin(a) && ((from != "OWNER" && to != "OWNER") || a == "OWNER")
					if !allowed {
						wantErrCode(t, res, "FORBIDDEN")
						if roleOf(t, env, ws, target.ID) != from || workspaceEvents(t, env, ws) != before {
							t.Fatal("a refused updateMemberRole changed something")
						}
						return
					}
					var d struct {
						UpdateMemberRole struct {
							Role string
							User struct{ ID string }
						}
					}
					mustData(t, res, &d)
					if d.UpdateMemberRole.Role != to || d.UpdateMemberRole.User.ID != target.ID || roleOf(t, env, ws, target.ID) != to {
						t.Fatalf("updateMemberRole = %+v", d.UpdateMemberRole)
					}
					wantEvents := 1
					if from == to {
						wantEvents = 0 // nothing changed, nothing recorded
					}
					if got := countEvents(t, env, ws, "member.role_changed", target.ID); got != wantEvents {
						t.Fatalf("%d member.role_changed events, want %d", got, wantEvents)
					}
					if wantEvents == 1 {
						var changes string
						if err := env.DB.Pool.QueryRow(context.Background(), `SELECT metadata->'changes'->>'role' FROM audit_events
							WHERE workspace_id = $1 AND action = 'member.role_changed'`, ws).Scan(&changes); err != nil {
							t.Fatal(err)
						}
						if want := fmt.Sprintf(`{"to": "%s", "from": "%s"}`, to, from); changes != want {
							t.Fatalf("metadata.changes.role = %s, want %s", changes, want)
						}
					}
				})
			}
		}
	}
}

func TestRemoveMemberRoleRules(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, a := range roles {
		for _, r := range roles {
			t.Run(a+" removes "+r, func(t *testing.T) {
				t.Parallel()
				ws, actor, target := matrixWorkspace(t, env, a, r)
				before := workspaceEvents(t, env, ws)
				res := post(t, env, actor.Token, removeMemberMutation, map[string]any{"w": ws, "u": target.ID})
				allowed := atLeastAdmin(a) && (r != "OWNER" || a == "OWNER")
				if !allowed {
					wantErrCode(t, res, "FORBIDDEN")
					if roleOf(t, env, ws, target.ID) != r || workspaceEvents(t, env, ws) != before {
						t.Fatal("a refused removeMember changed something")
					}
					return
				}
				var d struct{ RemoveMember bool }
				mustData(t, res, &d)
				if !d.RemoveMember || roleOf(t, env, ws, target.ID) != "" {
					t.Fatal("member not removed")
				}
				if countEvents(t, env, ws, "member.removed", target.ID) != 1 {
					t.Fatal("no member.removed event for the member's user id")
				}
			})
		}
	}
}

func TestMembersLeaveThemselves(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, r := range roles {
		t.Run(r, func(t *testing.T) {
			t.Parallel()
			ws, actor, _ := matrixWorkspace(t, env, r, "")
			var d struct{ RemoveMember bool }
			// The id in upper case is still their own.
			mustData(t, post(t, env, actor.Token, removeMemberMutation, map[string]any{"w": ws, "u": strings.ToUpper(actor.ID)}), &d)
			if roleOf(t, env, ws, actor.ID) != "" || countEvents(t, env, ws, "member.removed", actor.ID) != 1 {
				t.Fatal("leaving did not remove the member or record it")
			}
			// Gone: the workspace is now invisible to them.
			wantErrCode(t, post(t, env, actor.Token, `query($w: ID!) { workspace(id: $w) { id } }`, map[string]any{"w": ws}), "NOT_FOUND")
		})
	}
}

func TestLastOwnerCannotBeRemovedOrDemoted(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	before := workspaceEvents(t, env, ws)
	for _, to := range []string{"ADMIN", "MEMBER", "VIEWER"} {
		wantErrCode(t, post(t, env, owner.Token, updateRoleMutation, map[string]any{"w": ws, "u": owner.ID, "r": to}), "CONFLICT")
	}
	wantErrCode(t, post(t, env, owner.Token, removeMemberMutation, map[string]any{"w": ws, "u": owner.ID}), "CONFLICT")
	if roleOf(t, env, ws, owner.ID) != "OWNER" || workspaceEvents(t, env, ws) != before {
		t.Fatal("a refused last-owner change changed something")
	}
	// With a second owner, the first may step down.
	second := env.NewUser(t, "Second")
	joinWorkspace(t, env, owner, ws, second, "OWNER")
	mustData(t, post(t, env, owner.Token, updateRoleMutation, map[string]any{"w": ws, "u": owner.ID, "r": "ADMIN"}), nil)
	wantErrCode(t, post(t, env, second.Token, removeMemberMutation, map[string]any{"w": ws, "u": second.ID}), "CONFLICT")
}

// Two OWNERs demoting or removing themselves at once: exactly one succeeds,
// the other is refused, and the workspace keeps one OWNER. Likewise when each
// demotes or removes the other (the loser is no longer an OWNER, so
// FORBIDDEN, or no longer a member, so NOT_FOUND, or CONFLICT). The
// workspace's lock is taken in a statement before the one that counts the
// OWNERs (store.memberChange), so the count sees the other's commit.
func TestConcurrentDemotionsKeepAnOwner(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for i := range 12 {
		cross, remove := i%2 == 1, i%4 >= 2
		owner := env.NewUser(t, "A")
		other := env.NewUser(t, "B")
		ws := mkWorkspace(t, env, owner)
		joinWorkspace(t, env, owner, ws, other, "OWNER")
		pairs := [][2]apitest.User{{owner, owner}, {other, other}}
		if cross {
			pairs = [][2]apitest.User{{owner, other}, {other, owner}}
		}
		codes := make([]string, 2)
		var wg sync.WaitGroup
		for j, p := range pairs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if remove {
					codes[j] = post(t, env, p[0].Token, removeMemberMutation, map[string]any{"w": ws, "u": p[1].ID}).Code()
				} else {
					codes[j] = post(t, env, p[0].Token, updateRoleMutation, map[string]any{"w": ws, "u": p[1].ID, "r": "ADMIN"}).Code()
				}
			}()
		}
		wg.Wait()
		ok, refused := 0, 0
		for _, c := range codes {
			switch c {
			case "":
				ok++
			case "CONFLICT", "FORBIDDEN", "NOT_FOUND":
				refused++
			}
		}
		if ok != 1 || refused != 1 {
			t.Fatalf("round %d (cross=%v, remove=%v): codes %q, want one success and one refusal", i, cross, remove, codes)
		}
		var owners int
		if err := env.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM members WHERE workspace_id = $1 AND role = 'OWNER'`, ws).Scan(&owners); err != nil {
			t.Fatal(err)
		}
		if owners != 1 {
			t.Fatalf("round %d: %d owners left, want 1", i, owners)
		}
		action := map[bool]string{false: "member.role_changed", true: "member.removed"}[remove]
		if n := countEvents(t, env, ws, action, owner.ID) + countEvents(t, env, ws, action, other.ID); n != 1 {
			t.Fatalf("round %d: %d %s events, want 1", i, n, action)
		}
	}
}

func TestMemberErrors(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	member := env.NewUser(t, "Member")
	joinWorkspace(t, env, owner, ws, member, "MEMBER")
	stranger := env.NewUser(t, "Stranger")
	before := workspaceEvents(t, env, ws)

	// Malformed e-mail, existing member (in any case and spacing).
	wantErrCode(t, post(t, env, owner.Token, inviteMutation, map[string]any{"w": ws, "e": "not an e-mail", "r": "MEMBER"}), "BAD_USER_INPUT")
	wantErrCode(t, post(t, env, owner.Token, inviteMutation, map[string]any{"w": ws, "e": " " + strings.ToUpper(member.Email), "r": "VIEWER"}), "CONFLICT")
	if roleOf(t, env, ws, member.ID) != "MEMBER" || openInvitations(t, env, ws) != 0 {
		t.Fatal("CONFLICT changed something")
	}
	// A non-member, an unknown workspace and a malformed id all look the same.
	for _, w := range []string{ws, "00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
		wantErrCode(t, post(t, env, stranger.Token, inviteMutation, map[string]any{"w": w, "e": stranger.Email, "r": "MEMBER"}), "NOT_FOUND")
		wantErrCode(t, post(t, env, stranger.Token, updateRoleMutation, map[string]any{"w": w, "u": member.ID, "r": "VIEWER"}), "NOT_FOUND")
		wantErrCode(t, post(t, env, stranger.Token, removeMemberMutation, map[string]any{"w": w, "u": member.ID}), "NOT_FOUND")
		wantErrCode(t, post(t, env, stranger.Token, `query($w: ID!) { workspace(id: $w) { id } }`, map[string]any{"w": w}), "NOT_FOUND")
	}
	// A user who is not a member of the workspace, or a malformed user id.
	for _, u := range []string{stranger.ID, "nope"} {
		wantErrCode(t, post(t, env, owner.Token, updateRoleMutation, map[string]any{"w": ws, "u": u, "r": "VIEWER"}), "NOT_FOUND")
		wantErrCode(t, post(t, env, owner.Token, removeMemberMutation, map[string]any{"w": ws, "u": u}), "NOT_FOUND")
	}
	// Anonymous.
	wantErrCode(t, post(t, env, "", inviteMutation, map[string]any{"w": ws, "e": stranger.Email, "r": "MEMBER"}), "UNAUTHENTICATED")
	wantErrCode(t, post(t, env, "", updateRoleMutation, map[string]any{"w": ws, "u": member.ID, "r": "VIEWER"}), "UNAUTHENTICATED")
	wantErrCode(t, post(t, env, "", removeMemberMutation, map[string]any{"w": ws, "u": member.ID}), "UNAUTHENTICATED")
	wantErrCode(t, post(t, env, "", `query($w: ID!) { workspace(id: $w) { id } }`, map[string]any{"w": ws}), "UNAUTHENTICATED")
	if workspaceEvents(t, env, ws) != before {
		t.Fatal("refused member changes left audit events")
	}
}

func TestRemovedMemberIsUnassigned(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	m := env.NewUser(t, "Member")
	joinWorkspace(t, env, owner, ws, m, "MEMBER")
	p := mkProject(t, env, owner, ws, "P")
	var task string
	if err := env.DB.Pool.QueryRow(ctx, `INSERT INTO tasks (project_id, workspace_id, title, assignee_id, created_by)
		VALUES ($1, $2, 't', $3, $4) RETURNING id`, p, ws, m.ID, owner.ID).Scan(&task); err != nil {
		t.Fatal(err)
	}
	mustData(t, post(t, env, owner.Token, removeMemberMutation, map[string]any{"w": ws, "u": m.ID}), nil)
	var assignee *string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT assignee_id::text FROM tasks WHERE id = $1`, task).Scan(&assignee); err != nil {
		t.Fatal(err)
	}
	if assignee != nil {
		t.Fatal("the removed member is still assigned")
	}
	var n string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT metadata->>'unassignedTasks' FROM audit_events WHERE action = 'member.removed' AND entity_id = $1`, m.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != "1" {
		t.Fatalf("unassignedTasks = %s, want 1", n)
	}
}

func TestWorkspaceMembersAndSharedWorkspaces(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	alice := env.NewUser(t, "Alice")
	bob := env.NewUser(t, "Bob")
	shared := mkWorkspace(t, env, alice)
	_ = mkWorkspace(t, env, alice) // alice only
	bobsOwn := mkWorkspace(t, env, bob)
	joinWorkspace(t, env, alice, shared, bob, "VIEWER")
	before := workspaceEvents(t, env, shared)

	var d struct {
		Workspace struct {
			ID, Name, ViewerRole string
			Members              []struct {
				Role string
				User struct {
					ID         string
					Workspaces []struct{ ID, ViewerRole string }
				}
			}
		}
	}
	mustData(t, post(t, env, bob.Token, `query($w: ID!) { workspace(id: $w) { id name viewerRole
		members { role user { id workspaces { id viewerRole } } } } }`, map[string]any{"w": shared}), &d)
	w := d.Workspace
	if w.ID != shared || w.ViewerRole != "VIEWER" || len(w.Members) != 2 {
		t.Fatalf("workspace = %+v", w)
	}
	// Newest member first: bob, then alice (the owner).
	if w.Members[0].User.ID != bob.ID || w.Members[0].Role != "VIEWER" || w.Members[1].User.ID != alice.ID || w.Members[1].Role != "OWNER" {
		t.Fatalf("members = %+v", w.Members)
	}
	// Bob sees all of his own workspaces (newest first), but only the shared one of Alice's.
	if got := w.Members[0].User.Workspaces; len(got) != 2 || got[0].ID != bobsOwn || got[1].ID != shared {
		t.Fatalf("bob's workspaces = %+v", got)
	}
	if got := w.Members[1].User.Workspaces; len(got) != 1 || got[0].ID != shared || got[0].ViewerRole != "VIEWER" {
		t.Fatalf("alice's workspaces as bob sees them = %+v", got)
	}
	// A viewer may read but not change anything.
	wantErrCode(t, post(t, env, bob.Token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "x"}) { id } }`,
		map[string]any{"w": shared}), "FORBIDDEN")
	if workspaceEvents(t, env, shared) != before {
		t.Fatal("a refused createProject left an event")
	}
}

func TestCreateWorkspace(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.NewUser(t, "U")
	var d struct {
		CreateWorkspace struct {
			ID, Name, ViewerRole string
			Members              []struct {
				Role string
				User struct{ ID string }
			}
		}
	}
	mustData(t, post(t, env, u.Token, `mutation { createWorkspace(input: {name: "  Team  "}) { id name viewerRole members { role user { id } } } }`, nil), &d)
	w := d.CreateWorkspace
	if w.Name != "Team" || w.ViewerRole != "OWNER" || len(w.Members) != 1 || w.Members[0].User.ID != u.ID || w.Members[0].Role != "OWNER" {
		t.Fatalf("createWorkspace = %+v", w)
	}
	if countEvents(t, env, w.ID, "workspace.created", w.ID) != 1 {
		t.Fatal("no workspace.created event")
	}
	for _, name := range []string{"", "   ", strings.Repeat("w", store.MaxNameLength+1)} {
		wantErrCode(t, post(t, env, u.Token, `mutation($n: String!) { createWorkspace(input: {name: $n}) { id } }`, map[string]any{"n": name}), "BAD_USER_INPUT")
	}
	wantErrCode(t, post(t, env, "", `mutation { createWorkspace(input: {name: "x"}) { id } }`, nil), "UNAUTHENTICATED")
	var n int
	if err := env.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM workspaces`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d workspaces, want 1 (%v)", n, err)
	}
	var me struct {
		Me struct{ Workspaces []struct{ ID string } }
	}
	mustData(t, post(t, env, u.Token, `{ me { workspaces { id } } }`, nil), &me)
	if len(me.Me.Workspaces) != 1 || me.Me.Workspaces[0].ID != w.ID {
		t.Fatalf("me.workspaces = %+v", me.Me.Workspaces)
	}
}
