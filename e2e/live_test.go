package e2e

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// liveFixture is a workspace with a project, its owner and two members.
type liveFixture struct {
	env                *apitest.Env
	owner, ann, bob    apitest.User
	workspace, project string
}

func newLiveFixture(t *testing.T) *liveFixture {
	t.Helper()
	f := &liveFixture{env: apitest.New(t)}
	f.owner, f.ann, f.bob = f.env.NewUser(t, "Olive"), f.env.NewUser(t, "Ann"), f.env.NewUser(t, "Bob")
	ws := mustData[struct{ CreateWorkspace struct{ ID string } }](t, f.env.Post(t, f.owner.Token,
		`mutation { createWorkspace(input: {name: "Live Co"}) { id } }`, nil))
	f.workspace = ws.CreateWorkspace.ID
	proj := mustData[struct{ CreateProject struct{ ID string } }](t, f.env.Post(t, f.owner.Token,
		`mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "Board"}) { id } }`,
		map[string]any{"ws": f.workspace}))
	f.project = proj.CreateProject.ID
	for _, u := range []apitest.User{f.ann, f.bob} {
		if _, err := f.env.DB.Pool.Exec(context.Background(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`,
			f.workspace, u.ID); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// The real graphql-ws and graphql-sse clients from npm subscribe to a
// project from the changesCursor of a query of its tasks (the live view's
// recipe): tasks created through the API arrive; after a stop, a new
// subscription with the last cursor gets the three missed tasks in order,
// then a live one; a logout ends the stream with UNAUTHENTICATED.
func TestLiveWithNpmClients(t *testing.T) {
	t.Parallel()
	nodeModules(t)
	f := newLiveFixture(t)
	out := runNode(t, 3*time.Minute, nil, "live-clients.mjs", f.env.Server.URL, f.ann.Token, f.bob.Token, f.project)
	var run struct {
		Error   string
		Results []struct {
			Name                     string
			Live                     []struct{ Sent, Got, Action, Title string }
			MissedSent               []string
			Resumed                  []string
			LiveAfterSent, LiveAfter string
			AfterLogout              []string
			Ended                    bool
		}
	}
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatalf("live-clients.mjs printed %q: %v", out, err)
	}
	if run.Error != "" {
		t.Fatalf("live-clients.mjs: %s", run.Error)
	}
	var names []string
	for _, r := range run.Results {
		names = append(names, r.Name)
		for _, l := range r.Live {
			if l.Got != l.Sent || l.Action != "task.created" || !strings.HasPrefix(l.Title, r.Name) {
				t.Errorf("%s: live item %+v", r.Name, l)
			}
		}
		if len(r.Live) != 2 {
			t.Errorf("%s: %d live items", r.Name, len(r.Live))
		}
		if !slices.Equal(r.Resumed, r.MissedSent) {
			t.Errorf("%s: resumed with %v, want the missed %v in order", r.Name, r.Resumed, r.MissedSent)
		}
		if r.LiveAfter != r.LiveAfterSent {
			t.Errorf("%s: after the catch-up got %s, want %s", r.Name, r.LiveAfter, r.LiveAfterSent)
		}
		if !slices.Contains(r.AfterLogout, "UNAUTHENTICATED") || !r.Ended {
			t.Errorf("%s: after logout %v (ended %v)", r.Name, r.AfterLogout, r.Ended)
		}
	}
	if !slices.Equal(names, []string{"graphql-ws", "graphql-sse"}) {
		t.Errorf("clients run: %v", names)
	}
}

// liveBrowserRun is what e2e/node/playground-live.mjs reports.
type liveBrowserRun struct {
	browserRun
	CreatedTaskIDs []string `json:"createdTaskIds"`
}

// An admin starts the playground's live audit tab in Chromium, a change is
// made in another window, and the event shows up in the result pane.
func TestPlaygroundLiveAuditInChromium(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(chromiumPath())
	require(t, err == nil, "chromium ("+chromiumPath()+", Debian package chromium)")
	nodeModules(t)
	f := newLiveFixture(t)
	run := runBrowser[liveBrowserRun](t, "playground-live.mjs", f.env.Server.URL, f.owner.Token, f.workspace, f.project)
	if !strings.Contains(run.ChosenTab, "LiveAudit") {
		t.Fatalf("tabs %q: no live audit tab", run.Tabs)
	}
	if len(run.CreatedTaskIDs) == 0 || !slices.Contains(run.Steps, "event arrived") {
		t.Fatalf("no event arrived: steps %v, result pane %q", run.Steps, run.ResultText)
	}
	last := run.CreatedTaskIDs[len(run.CreatedTaskIDs)-1]
	var result struct {
		Data struct {
			AuditEventAdded struct {
				Cursor string
				Event  struct {
					Action, EntityID string
					Actor            struct{ ID string }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(run.ResultText), &result); err != nil {
		t.Fatalf("result pane holds %q: %v", run.ResultText, err)
	}
	ev := result.Data.AuditEventAdded
	if ev.Event.Action != "task.created" || ev.Event.EntityID != last || ev.Event.Actor.ID != f.owner.ID || ev.Cursor == "" {
		t.Errorf("result pane shows %+v, want task.created of %s by the owner", ev, last)
	}
	if !strings.Contains(run.VisibleResultText, last) {
		t.Errorf("the visible result pane does not show the task:\n%s", run.VisibleResultText)
	}
	if len(run.ForeignRequests) > 0 || len(run.PageErrors) > 0 {
		t.Errorf("foreign requests %v, page errors %v", run.ForeignRequests, run.PageErrors)
	}
}
