package resolvers_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/99designs/gqlgen/client"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store"
	"taskflow/store/storetest"
)

// A workspace's members with their users and their users' workspaces, and its
// projects with their workspace, cost a bounded number of statements however
// many members and projects there are.
func TestAccountHopsAreBatched(t *testing.T) {
	t.Parallel()
	tally := &storetest.Statements{}
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tally }), nil)
	h := httpapi.NewHandler(httpapi.Options{DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordParams: auth.FastPasswordParams})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	env := &apitest.Env{DB: db, Handler: h, Client: client.New(h), Server: srv}

	const n = 15
	owner := env.NewUser(t, "Owner")
	ws := mkWorkspace(t, env, owner)
	for range n {
		joinWorkspace(t, env, owner, ws, env.NewUser(t, "M"), "MEMBER")
		mkProject(t, env, owner, ws, "P")
	}
	before := tally.Count()
	var d struct {
		Workspace struct {
			Members []struct {
				User struct{ Workspaces []struct{ ID string } }
			}
			Projects struct {
				Nodes []struct{ Workspace struct{ ID string } }
			}
		}
	}
	mustData(t, post(t, env, owner.Token, `query($w: ID!) { workspace(id: $w) {
		members { user { id workspaces { id viewerRole } } }
		projects(first: 50) { nodes { id workspace { id viewerRole } } } } }`, map[string]any{"w": ws}), &d)
	used := tally.Count() - before
	if len(d.Workspace.Members) != n+1 || len(d.Workspace.Projects.Nodes) != n {
		t.Fatalf("%d members, %d projects", len(d.Workspace.Members), len(d.Workspace.Projects.Nodes))
	}
	for _, m := range d.Workspace.Members {
		if len(m.User.Workspaces) != 1 || m.User.Workspaces[0].ID != ws {
			t.Fatalf("member workspaces = %+v", m.User.Workspaces)
		}
	}
	// token, workspace, members, projects, users, workspaces of users, with room
	// for a batch split in two by scheduling; unbatched it would be over 2n.
	t.Logf("%d statements", used)
	if used > 12 {
		t.Fatalf("%d statements for %d members and projects, want at most 12", used, n)
	}
}
