package resolvers_test

import (
	"context"
	"fmt"
	"testing"

	"taskflow/httpapi/apitest"
)

// TestInvisibleCharactersInNewNames sends names that show as another one, or
// reversed, or recolour a terminal, to register, createWorkspace,
// createProject and updateProject: each is BAD_USER_INPUT naming the field
// and the code point, and leaves no event. A family emoji (zero-width joiners
// between emoji) and an ideographic space are taken. An account, workspace
// and project named so before the rule still sign in, read and edit.
func TestInvisibleCharactersInNewNames(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	p := mkProject(t, env, owner, ws, "P")
	before := workspaceEvents(t, env, ws)
	mutations := map[string]func(name string) *apitest.Response{
		"register": func(name string) *apitest.Response {
			return post(t, env, "", registerMutation, map[string]any{"e": uniqueEmail("n"), "p": "correct horse", "n": name})
		},
		"createWorkspace": func(name string) *apitest.Response {
			return post(t, env, owner.Token, `mutation($n: String!) { createWorkspace(input: {name: $n}) { id name } }`, map[string]any{"n": name})
		},
		"createProject": func(name string) *apitest.Response {
			return post(t, env, owner.Token, createProjectMutation, map[string]any{"w": ws, "n": name})
		},
		"updateProject": func(name string) *apitest.Response {
			return post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p, "in": map[string]any{"name": name}})
		},
	}
	for what, send := range mutations {
		for name, message := range map[string]string{
			"Alice\u202Egnp.exe":      "name: holds an invisible or formatting character (U+202E)",
			"admin\u200b":             "name: holds an invisible or formatting character (U+200B)",
			"\u2066Bob\u2069":         "name: holds an invisible or formatting character (U+2066)",
			"\ufeffCarol":             "name: holds an invisible or formatting character (U+FEFF)",
			"Da\u00advid":             "name: holds an invisible or formatting character (U+00AD)",
			"Eve\x1b[31m red":         "name: holds an invisible or formatting character (U+001B)",
			"Frank\u009b31m":          "name: holds an invisible or formatting character (U+009B)",
			"Grace\u00a0Hopper":       "name: holds a space or line break other than the plain space U+0020 (U+00A0)",
			"Heidi\u2028Klum":         "name: holds a space or line break other than the plain space U+0020 (U+2028)",
			"Ivan\u200d":              "name: holds an invisible or formatting character (U+200D)",
			"\U0001F468\u200dMallory": "name: holds an invisible or formatting character (U+200D)",
			"admin\uFE0F":             "name: holds an invisible or formatting character (U+FE0F)",
			"admin\uFE0E":             "name: holds an invisible or formatting character (U+FE0E)",
			"Oscar\U000E0100":         "name: holds an invisible or formatting character (U+E0100)",
			"Peggy\u2800":             "name: holds an invisible or formatting character (U+2800)",
		} {
			r := send(name)
			if r.Code() != "BAD_USER_INPUT" || len(r.Body.Errors) == 0 || r.Body.Errors[0]["message"] != message {
				t.Errorf("%s %q: %s; want BAD_USER_INPUT %q", what, name, r.Raw, message)
			}
		}
	}
	if n := workspaceEvents(t, env, ws); n != before {
		t.Errorf("refused names left %d events in the workspace", n-before)
	}
	var registered int
	if err := env.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&registered); err != nil || registered != 1 {
		t.Errorf("%d users after refused registrations, want 1 (%v)", registered, err)
	}
	for what, send := range mutations {
		for _, name := range []string{"\U0001F468\u200d\U0001F469\u200d\U0001F467 Family", "山田\u3000太郎",
			"Team \u2764\uFE0F", "\u8FBB\U000E0100 Co"} {
			var d map[string]struct {
				Name string
				User struct{ Name string } // register's
			}
			mustData(t, send(name), &d)
			if got := d[what].Name + d[what].User.Name; got != name {
				t.Errorf("%s %q: name %q", what, name, got)
			}
		}
	}

	// Named before the rule: the account signs in and reads its name, the
	// project's description is edited with its name sent back unchanged.
	const old = "admin\u200b"
	email := uniqueEmail("old")
	a := register(t, env, email, "correct horse", "Old")
	for _, table := range []string{"users", "workspaces", "projects"} {
		id := map[string]string{"users": a.User.ID, "workspaces": ws, "projects": p}[table]
		if _, err := env.DB.Pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET name = $2 WHERE id = $1`, table), id, old); err != nil {
			t.Fatal(err)
		}
	}
	var login struct{ Login struct{ Token string } }
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": email, "p": "correct horse"}), &login)
	var me struct{ Me struct{ Name string } }
	mustData(t, post(t, env, login.Login.Token, `{ me { name } }`, nil), &me)
	if me.Me.Name != old {
		t.Errorf("me.name = %q, want %q", me.Me.Name, old)
	}
	var w struct{ Workspace struct{ Name string } }
	mustData(t, post(t, env, owner.Token, `query($w: ID!) { workspace(id: $w) { name } }`, map[string]any{"w": ws}), &w)
	if w.Workspace.Name != old {
		t.Errorf("workspace.name = %q, want %q", w.Workspace.Name, old)
	}
	var u struct {
		UpdateProject struct{ Name, Description string }
	}
	mustData(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p, "in": map[string]any{"name": old, "description": "d"}}), &u)
	if u.UpdateProject.Name != old || u.UpdateProject.Description != "d" {
		t.Errorf("updateProject with its old name = %+v", u.UpdateProject)
	}
	wantErrCode(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p, "in": map[string]any{"name": "admin\u200c"}}), "BAD_USER_INPUT")
	// Such a name may be the project's own: it is checked once the project is
	// found, so a stranger is told NOT_FOUND, as for any project he cannot see.
	stranger := env.NewUser(t, "Stranger")
	wantErrCode(t, post(t, env, stranger.Token, updateProjectMutation, map[string]any{"id": p, "in": map[string]any{"name": "admin\u200c"}}), "NOT_FOUND")
}
