package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// chromiumPath is Debian's chromium (package chromium); CHROMIUM overrides it.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// browserRun is what e2e/node/playground.mjs reports.
type browserRun struct {
	Steps             []string `json:"steps"`
	Error             string   `json:"error"`
	PageStatus        int      `json:"pageStatus"`
	Tabs              []string `json:"tabs"`
	ChosenTab         string   `json:"chosenTab"`
	HeadersBefore     string   `json:"headersBefore"`
	HeadersAfter      string   `json:"headersAfter"`
	ResultText        string   `json:"resultText"`
	VisibleResultText string   `json:"visibleResultText"`
	DocsText          string   `json:"docsText"`
	Screenshot        string   `json:"screenshot"`
	ConsoleErrors     []string `json:"consoleErrors"`
	PageErrors        []string `json:"pageErrors"`
	ForeignRequests   []string `json:"foreignRequests"`
	FailedRequests    []string `json:"failedRequests"`
}

// An admin opens the playground in Chromium, pastes a token into the Headers
// editor, runs the auditEvents example tab and sees the workspace's events in
// the result pane; nothing is fetched from another origin.
func TestPlaygroundInChromium(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(chromiumPath())
	require(t, err == nil, "chromium ("+chromiumPath()+", Debian package chromium)")
	nodeModules(t)

	env := apitest.New(t)
	owner := env.NewUser(t, "Olive")
	ws := mustData[struct{ CreateWorkspace struct{ ID string } }](t, env.Post(t, owner.Token,
		`mutation { createWorkspace(input: {name: "Browser Co"}) { id } }`, nil))
	wsID := ws.CreateWorkspace.ID
	proj := mustData[struct{ CreateProject struct{ ID string } }](t, env.Post(t, owner.Token,
		`mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "Launch"}) { id } }`,
		map[string]any{"ws": wsID}))
	mustData[struct{ UpdateProject struct{ ID string } }](t, env.Post(t, owner.Token,
		`mutation($id: ID!) { updateProject(id: $id, input: {name: "Launch v2"}) { id } }`,
		map[string]any{"id": proj.CreateProject.ID}))

	run := runBrowser[browserRun](t, "playground.mjs", env.Server.URL, owner.Token, wsID)

	if run.PageStatus != 200 {
		t.Errorf("GET / = %d", run.PageStatus)
	}
	if len(run.ForeignRequests) > 0 {
		t.Errorf("the playground fetched from other origins: %v", run.ForeignRequests)
	}
	if len(run.PageErrors) > 0 || len(run.ConsoleErrors) > 0 {
		t.Errorf("page errors %v, console errors %v", run.PageErrors, run.ConsoleErrors)
	}
	if !strings.Contains(run.ChosenTab, "Audit") {
		t.Errorf("tabs = %q: none browses the audit log", run.Tabs)
	}
	if len(run.Tabs) < 3 {
		t.Errorf("tabs = %q, want the example tabs", run.Tabs)
	}
	if !strings.Contains(run.HeadersBefore, "Authorization") || strings.Contains(run.HeadersBefore, owner.Token) {
		t.Errorf("headers editor started with %q, want the Authorization placeholder", run.HeadersBefore)
	}
	if !strings.Contains(run.HeadersAfter, owner.Token) {
		t.Errorf("headers editor holds %q after pasting the token", run.HeadersAfter)
	}
	if !strings.Contains(run.DocsText, "Query") {
		t.Errorf("documentation explorer shows %q, want the schema's root types", run.DocsText)
	}

	// The result pane holds the server's answer: the workspace's events,
	// newest first.
	var result struct {
		Data struct {
			AuditEvents struct {
				Nodes []struct {
					Action     string
					EntityType string
					EntityID   string
					Actor      struct{ ID string }
					Metadata   json.RawMessage
				}
				PageInfo struct{ HasNextPage bool }
			}
		}
		Errors []json.RawMessage
	}
	if err := json.Unmarshal([]byte(run.ResultText), &result); err != nil {
		t.Fatalf("result pane holds %q: %v", run.ResultText, err)
	}
	if len(result.Errors) > 0 {
		t.Fatalf("result pane shows errors: %s", run.ResultText)
	}
	var actions []string
	for _, n := range result.Data.AuditEvents.Nodes {
		actions = append(actions, n.Action)
		if n.Actor.ID != owner.ID {
			t.Errorf("event %s by %q, want the owner %q", n.Action, n.Actor.ID, owner.ID)
		}
	}
	want := []string{"project.updated", "project.created", "workspace.created"}
	if strings.Join(actions, ",") != strings.Join(want, ",") {
		t.Errorf("result pane lists actions %v, want %v", actions, want)
	}
	if n := result.Data.AuditEvents.Nodes; len(n) > 0 && !strings.Contains(string(n[0].Metadata), "Launch v2") {
		t.Errorf("project.updated metadata = %s, want the name change", n[0].Metadata)
	}
	// What is on screen, not only in the editor's buffer: the newest event.
	if !strings.Contains(run.VisibleResultText, "project.updated") {
		t.Errorf("visible result pane does not show project.updated:\n%s", run.VisibleResultText)
	}
}

// browserReport is a report of a browser script: browserRun, or a struct
// that embeds it.
type browserReport interface{ base() *browserRun }

func (r *browserRun) base() *browserRun { return r }

// runBrowser runs a browser script of e2e/node in Chromium with args and a
// screenshot path appended, decodes its report, keeps the screenshot as an
// artifact, and fails the test when the run stopped with an error.
func runBrowser[T any, P interface {
	*T
	browserReport
}](t *testing.T, script string, args ...string) *T {
	t.Helper()
	out := runNode(t, 3*time.Minute, []string{"CHROMIUM=" + chromiumPath()}, script, append(args, screenshotPath(t))...)
	run := P(new(T))
	if err := json.Unmarshal(out, run); err != nil {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	b := run.base()
	if b.Screenshot != "" {
		t.Logf("screenshot: %s", b.Screenshot)
		copyArtifact(t, b.Screenshot)
	}
	if b.Error != "" {
		t.Fatalf("browser run stopped after %v: %s\nconsole errors: %v\npage errors: %v\nfailed requests: %v",
			b.Steps, b.Error, b.ConsoleErrors, b.PageErrors, b.FailedRequests)
	}
	return (*T)(run)
}

// mustData decodes the data of a successful GraphQL response.
func mustData[T any](t *testing.T, r *apitest.Response) T {
	t.Helper()
	var v T
	if r.Status != 200 || len(r.Body.Errors) > 0 {
		t.Fatalf("HTTP %d: %s", r.Status, r.Raw)
	}
	if err := json.Unmarshal(r.Body.Data, &v); err != nil {
		t.Fatalf("%s: %v", r.Body.Data, err)
	}
	return v
}

// screenshotPath is where the browser run saves its screenshot:
// e2e/artifacts/ (gitignored), kept after the test.
func screenshotPath(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("artifacts")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, t.Name()+".png")
}

// copyArtifact copies a file to $TEST_ARTIFACTS when CI sets it.
func copyArtifact(t *testing.T, path string) {
	t.Helper()
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("artifact %s: %v", path, err)
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("TEST_ARTIFACTS: %v", err)
		return
	}
	dst := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Errorf("artifact %s: %v", dst, err)
		return
	}
	t.Logf("screenshot artifact: %s", dst)
}
