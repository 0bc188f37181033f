package resolvers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
	"taskflow/store"
)

const (
	createProjectMutation  = `mutation($w: ID!, $n: String!, $d: String) { createProject(input: {workspaceId: $w, name: $n, description: $d}) { id name description archived createdAt updatedAt workspace { id viewerRole } } }`
	updateProjectMutation  = `mutation($id: ID!, $in: UpdateProjectInput!) { updateProject(id: $id, input: $in) { id name description updatedAt archived } }`
	archiveProjectMutation = `mutation($id: ID!) { archiveProject(id: $id) { id archived archivedAt updatedAt } }`
	projectsQuery          = `query($w: ID!, $a: Boolean, $f: Int, $after: String) { workspace(id: $w) {
		projects(includeArchived: $a, first: $f, after: $after) { edges { cursor node { id } } nodes { id } pageInfo { hasNextPage endCursor } } } }`
)

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type projectOut struct {
	ID, Name, UpdatedAt, CreatedAt string
	Description                    *string
	Archived                       bool
	ArchivedAt                     *string
	Workspace                      struct{ ID, ViewerRole string }
}

func TestProjectRoleRules(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, a := range roles {
		t.Run(a, func(t *testing.T) {
			t.Parallel()
			owner := env.NewUser(t, "Owner")
			ws := mkWorkspace(t, env, owner)
			actor := env.NewUser(t, "Actor")
			if a == "OWNER" {
				actor = owner
			} else {
				joinWorkspace(t, env, owner, ws, actor, a)
			}
			p := mkProject(t, env, owner, ws, "Existing")
			before := workspaceEvents(t, env, ws)

			// Every role reads.
			var q struct{ Project projectOut }
			mustData(t, post(t, env, actor.Token, `query($id: ID!) { project(id: $id) { id name workspace { id viewerRole } } }`, map[string]any{"id": p}), &q)
			if q.Project.ID != p || q.Project.Workspace.ID != ws || q.Project.Workspace.ViewerRole != a {
				t.Fatalf("project = %+v", q.Project)
			}

			create := post(t, env, actor.Token, createProjectMutation, map[string]any{"w": ws, "n": "New"})
			update := post(t, env, actor.Token, updateProjectMutation, map[string]any{"id": p, "in": map[string]any{"name": "Renamed"}})
			if a == "VIEWER" {
				wantErrCode(t, create, "FORBIDDEN")
				wantErrCode(t, update, "FORBIDDEN")
			} else {
				var c struct{ CreateProject projectOut }
				mustData(t, create, &c)
				if countEvents(t, env, ws, "project.created", c.CreateProject.ID) != 1 {
					t.Fatal("no project.created event")
				}
				mustData(t, update, nil)
				if countEvents(t, env, ws, "project.updated", p) != 1 {
					t.Fatal("no project.updated event")
				}
			}
			archive := post(t, env, actor.Token, archiveProjectMutation, map[string]any{"id": p})
			if atLeastAdmin(a) {
				mustData(t, archive, nil)
				if countEvents(t, env, ws, "project.archived", p) != 1 {
					t.Fatal("no project.archived event")
				}
			} else {
				wantErrCode(t, archive, "FORBIDDEN")
				if countEvents(t, env, ws, "project.archived", p) != 0 {
					t.Fatal("refused archive left an event")
				}
			}
			if a == "VIEWER" && workspaceEvents(t, env, ws) != before {
				t.Fatal("a VIEWER's refused mutations left events")
			}
		})
	}
}

func TestProjectLifecycle(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)

	var c struct{ CreateProject projectOut }
	mustData(t, post(t, env, owner.Token, createProjectMutation, map[string]any{"w": ws, "n": "  Launch ", "d": "the plan"}), &c)
	p := c.CreateProject
	if p.Name != "Launch" || p.Description == nil || *p.Description != "the plan" || p.Archived || p.Workspace.ID != ws || p.Workspace.ViewerRole != "OWNER" {
		t.Fatalf("createProject = %+v", p)
	}
	var meta string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT metadata::text FROM audit_events WHERE action = 'project.created' AND entity_id = $1`, p.ID).Scan(&meta); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(meta, `"name": "Launch"`) || !strings.Contains(meta, `"description": "the plan"`) {
		t.Fatalf("project.created metadata = %s", meta)
	}

	// An update that changes nothing records nothing and keeps updatedAt.
	var u struct{ UpdateProject projectOut }
	mustData(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p.ID, "in": map[string]any{"name": "Launch"}}), &u)
	if u.UpdateProject.UpdatedAt != p.UpdatedAt || countEvents(t, env, ws, "project.updated", p.ID) != 0 {
		t.Fatal("a no-op update bumped updatedAt or recorded an event")
	}
	// A rename records metadata.changes and bumps updatedAt; an absent description stays.
	mustData(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p.ID, "in": map[string]any{"name": "Liftoff"}}), &u)
	if u.UpdateProject.Name != "Liftoff" || u.UpdateProject.Description == nil || !parseTime(t, u.UpdateProject.UpdatedAt).After(parseTime(t, p.UpdatedAt)) {
		t.Fatalf("updateProject = %+v (before %s)", u.UpdateProject, p.UpdatedAt)
	}
	if err := env.DB.Pool.QueryRow(ctx, `SELECT metadata::text FROM audit_events WHERE action = 'project.updated' AND entity_id = $1`, p.ID).Scan(&meta); err != nil {
		t.Fatal(err)
	}
	if meta != `{"changes": {"name": {"to": "Liftoff", "from": "Launch"}}}` {
		t.Fatalf("project.updated metadata = %s", meta)
	}
	// An explicit null clears the description.
	mustData(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p.ID, "in": map[string]any{"description": nil}}), &u)
	if u.UpdateProject.Description != nil || countEvents(t, env, ws, "project.updated", p.ID) != 2 {
		t.Fatalf("clearing the description: %+v", u.UpdateProject)
	}
	// Bad names change nothing.
	before := workspaceEvents(t, env, ws)
	for _, in := range []map[string]any{{"name": ""}, {"name": "  "}, {"name": nil}, {"name": strings.Repeat("n", store.MaxNameLength+1)},
		{"description": strings.Repeat("d", store.MaxDescriptionLength+1)}} {
		wantErrCode(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p.ID, "in": in}), "BAD_USER_INPUT")
	}
	for _, n := range []string{"", " \t "} {
		wantErrCode(t, post(t, env, owner.Token, createProjectMutation, map[string]any{"w": ws, "n": n}), "BAD_USER_INPUT")
	}
	if workspaceEvents(t, env, ws) != before {
		t.Fatal("refused project changes left events")
	}

	// Archive, then archive again: the same project, no second event.
	var a1, a2 struct {
		ArchiveProject projectOut
	}
	mustData(t, post(t, env, owner.Token, archiveProjectMutation, map[string]any{"id": p.ID}), &a1)
	if !a1.ArchiveProject.Archived || a1.ArchiveProject.ArchivedAt == nil || a1.ArchiveProject.UpdatedAt != *a1.ArchiveProject.ArchivedAt {
		t.Fatalf("archiveProject = %+v", a1.ArchiveProject)
	}
	mustData(t, post(t, env, owner.Token, archiveProjectMutation, map[string]any{"id": p.ID}), &a2)
	if *a2.ArchiveProject.ArchivedAt != *a1.ArchiveProject.ArchivedAt || countEvents(t, env, ws, "project.archived", p.ID) != 1 {
		t.Fatal("re-archiving changed the project or recorded an event")
	}
	var archivedChange bool
	if err := env.DB.Pool.QueryRow(ctx, `SELECT metadata->'changes'->'archivedAt' ? 'from' AND metadata->'changes'->'archivedAt'->>'from' IS NULL
		AND metadata->'changes'->'archivedAt'->>'to' IS NOT NULL
		FROM audit_events WHERE action = 'project.archived' AND entity_id = $1`, p.ID).Scan(&archivedChange); err != nil {
		t.Fatal(err)
	}
	if !archivedChange {
		t.Fatal("project.archived lacks metadata.changes.archivedAt from null")
	}

	// Archived: hidden from the list by default, still readable by id.
	var l struct {
		Workspace struct {
			Projects struct{ Nodes []struct{ ID string } }
		}
	}
	mustData(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws}), &l)
	if len(l.Workspace.Projects.Nodes) != 0 {
		t.Fatalf("archived project listed: %+v", l.Workspace.Projects.Nodes)
	}
	mustData(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws, "a": true}), &l)
	if len(l.Workspace.Projects.Nodes) != 1 || l.Workspace.Projects.Nodes[0].ID != p.ID {
		t.Fatalf("includeArchived list = %+v", l.Workspace.Projects.Nodes)
	}
	var q struct{ Project projectOut }
	mustData(t, post(t, env, owner.Token, `query($id: ID!) { project(id: $id) { id archived } }`, map[string]any{"id": p.ID}), &q)
	if !q.Project.Archived {
		t.Fatal("project(id) of an archived project")
	}
	// An archived project can still be renamed (there is no unarchive to undo it).
	mustData(t, post(t, env, owner.Token, updateProjectMutation, map[string]any{"id": p.ID, "in": map[string]any{"name": "Old launch"}}), &u)
	if u.UpdateProject.Name != "Old launch" || !u.UpdateProject.Archived {
		t.Fatalf("renaming an archived project: %+v", u.UpdateProject)
	}
}

func TestProjectsOfOtherWorkspacesAreNotFound(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	p := mkProject(t, env, owner, ws, "Secret")
	stranger := env.NewUser(t, "Stranger")
	mkWorkspace(t, env, stranger)
	before := workspaceEvents(t, env, ws)
	for _, id := range []string{p, "00000000-0000-0000-0000-000000000000", "garbage"} {
		wantErrCode(t, post(t, env, stranger.Token, `query($id: ID!) { project(id: $id) { id } }`, map[string]any{"id": id}), "NOT_FOUND")
		wantErrCode(t, post(t, env, stranger.Token, updateProjectMutation, map[string]any{"id": id, "in": map[string]any{"name": "x"}}), "NOT_FOUND")
		wantErrCode(t, post(t, env, stranger.Token, archiveProjectMutation, map[string]any{"id": id}), "NOT_FOUND")
	}
	wantErrCode(t, post(t, env, stranger.Token, createProjectMutation, map[string]any{"w": ws, "n": "x"}), "NOT_FOUND")
	wantErrCode(t, post(t, env, stranger.Token, createProjectMutation, map[string]any{"w": "garbage", "n": "x"}), "NOT_FOUND")
	wantErrCode(t, post(t, env, "", `query($id: ID!) { project(id: $id) { id } }`, map[string]any{"id": p}), "UNAUTHENTICATED")
	wantErrCode(t, post(t, env, "", createProjectMutation, map[string]any{"w": ws, "n": "x"}), "UNAUTHENTICATED")
	if workspaceEvents(t, env, ws) != before {
		t.Fatal("refused project changes left events")
	}
}

func TestProjectsPagination(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	var created []string
	for i := range 7 {
		created = append(created, mkProject(t, env, owner, ws, "P"+string(rune('a'+i))))
	}
	type page struct {
		Workspace struct {
			Projects struct {
				Edges []struct {
					Cursor string
					Node   struct{ ID string }
				}
				Nodes    []struct{ ID string }
				PageInfo struct {
					HasNextPage bool
					EndCursor   *string
				}
			}
		}
	}
	var got []string
	var after any
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		var d page
		mustData(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws, "f": 3, "after": after}), &d)
		pr := d.Workspace.Projects
		if len(pr.Edges) != len(pr.Nodes) {
			t.Fatal("edges and nodes differ")
		}
		for i, e := range pr.Edges {
			if e.Node.ID != pr.Nodes[i].ID {
				t.Fatal("edges and nodes differ")
			}
			got = append(got, e.Node.ID)
		}
		if !pr.PageInfo.HasNextPage {
			break
		}
		after = *pr.PageInfo.EndCursor
	}
	if len(got) != len(created) {
		t.Fatalf("got %d projects over the pages, want %d", len(got), len(created))
	}
	for i := range got {
		if got[i] != created[len(created)-1-i] {
			t.Fatalf("page order %v, want newest first %v", got, created)
		}
	}

	// Bad first.
	for _, f := range []int{0, -1, 101} {
		wantErrCode(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws, "f": f}), "BAD_USER_INPUT")
	}
	// A cursor of another list (other filter, other workspace) or garbage.
	var d page
	mustData(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws, "f": 1}), &d)
	cur := *d.Workspace.Projects.PageInfo.EndCursor
	wantErrCode(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws, "a": true, "after": cur}), "BAD_USER_INPUT")
	other := mkWorkspace(t, env, owner)
	wantErrCode(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": other, "after": cur}), "BAD_USER_INPUT")
	wantErrCode(t, post(t, env, owner.Token, projectsQuery, map[string]any{"w": ws, "after": "bm9wZQ"}), "BAD_USER_INPUT")
}

// The projects of several workspaces in one request come from one batch, each
// list with its own size, filter and cursor.
func TestProjectsOfSeveralWorkspacesAtOnce(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.NewUser(t, "U")
	var wss []string
	want := map[string][]string{}
	for i := range 3 {
		ws := mkWorkspace(t, env, u)
		wss = append(wss, ws)
		for j := 0; j < i+1; j++ {
			want[ws] = append([]string{mkProject(t, env, u, ws, "p")}, want[ws]...)
		}
	}
	archivedID := want[wss[2]][0]
	mustData(t, post(t, env, u.Token, archiveProjectMutation, map[string]any{"id": archivedID}), nil)
	var d struct {
		Me struct {
			Workspaces []struct {
				ID       string
				Projects struct {
					Nodes    []struct{ ID string }
					PageInfo struct{ HasNextPage bool }
				}
				All struct{ Nodes []struct{ ID string } }
			}
		}
	}
	mustData(t, post(t, env, u.Token, `{ me { workspaces { id projects(first: 2) { nodes { id } pageInfo { hasNextPage } }
		all: projects(includeArchived: true) { nodes { id } } } } }`, nil), &d)
	if len(d.Me.Workspaces) != 3 {
		t.Fatalf("%d workspaces", len(d.Me.Workspaces))
	}
	for _, w := range d.Me.Workspaces {
		all := want[w.ID]
		visible := all
		if w.ID == wss[2] {
			visible = all[1:]
		}
		if len(w.All.Nodes) != len(all) {
			t.Fatalf("workspace %s: includeArchived lists %d, want %d", w.ID, len(w.All.Nodes), len(all))
		}
		n := min(2, len(visible))
		if len(w.Projects.Nodes) != n || w.Projects.PageInfo.HasNextPage != (len(visible) > 2) {
			t.Fatalf("workspace %s: page %+v, want %d of %v", w.ID, w.Projects, n, visible)
		}
		for i := range n {
			if w.Projects.Nodes[i].ID != visible[i] {
				t.Fatalf("workspace %s: page %+v, want %v", w.ID, w.Projects.Nodes, visible)
			}
		}
	}
}
