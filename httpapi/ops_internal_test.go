package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/graph"
	"taskflow/querydoc"
)

// TestPlaygroundTabsAreValid checks every example of the playground against the
// schema, variables included, so the examples cannot rot; none may use a
// deprecated field or argument, which users would copy.
func TestPlaygroundTabsAreValid(t *testing.T) {
	t.Parallel()
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	var audit int
	for i, tab := range playgroundTabs {
		doc, errs := gqlparser.LoadQuery(schema, tab.Query)
		if errs != nil {
			t.Errorf("tab %d: %v", i, errs)
			continue
		}
		if uses := querydoc.NewValidator(schema, querydoc.DefaultLimits).DeprecatedIn(doc); uses != nil {
			t.Errorf("tab %d uses deprecated %v", i, uses)
		}
		if strings.Contains(tab.Query, "auditEvents") {
			audit++
		}
		var vars map[string]any
		if tab.Variables != "" {
			if err := json.Unmarshal([]byte(tab.Variables), &vars); err != nil {
				t.Errorf("tab %d variables: %v", i, err)
				continue
			}
		}
		if _, err := validator.VariableValues(schema, doc.Operations[0], vars); err != nil {
			t.Errorf("tab %d variables: %v", i, err)
		}
		var headers map[string]string
		if err := json.Unmarshal([]byte(tab.Headers), &headers); err != nil {
			t.Errorf("tab %d headers: %v", i, err)
		}
		if i > 0 && !strings.HasPrefix(headers["Authorization"], "Bearer ") {
			t.Errorf("tab %d has no Authorization header to edit: %q", i, tab.Headers)
		}
	}
	if audit < 3 {
		t.Errorf("%d audit examples, want at least 3 (latest, filtered and paged, one entity)", audit)
	}
}

// TestPlaygroundBundleExamplesAreValid checks the examples built into the
// playground bundle (web/playground/src/examples.js, shown when the server
// gives no tabs) as TestPlaygroundTabsAreValid checks the server's: valid
// against the schema, variables included, no deprecated field or argument
// and no audit action the server no longer records. It reads them with
// Node.js (skipped without it, unless CI is set), and checks that the
// committed bundle was built from them (docs/playground.md, Rebuilding).
func TestPlaygroundBundleExamplesAreValid(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is missing and CI is set")
		}
		t.Skip("node is missing (CI unset, so skipping)")
	}
	src, err := filepath.Abs(filepath.Join("..", "web", "playground", "src", "examples.js"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "--input-type=module", "-e", `
		import { pathToFileURL } from "node:url";
		const { examples } = await import(pathToFileURL(process.argv[1]).href);
		process.stdout.write(JSON.stringify(examples));`, src).Output()
	if err != nil {
		t.Fatalf("reading %s with node: %v", src, err)
	}
	var examples []struct{ Query, Variables string }
	if err := json.Unmarshal(out, &examples); err != nil || len(examples) == 0 {
		t.Fatalf("examples: %v %s", err, out)
	}
	gz, err := os.ReadFile(filepath.Join("playground", "assets", "playground.js.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	documents := querydoc.NewValidator(schema, querydoc.DefaultLimits)
	for i, ex := range examples {
		doc, errs := gqlparser.LoadQuery(schema, ex.Query)
		if errs != nil {
			t.Errorf("example %d: %v", i, errs)
			continue
		}
		if uses := documents.DeprecatedIn(doc); uses != nil {
			t.Errorf("example %d (%s) uses deprecated %v", i, doc.Operations[0].Name, uses)
		}
		var vars map[string]any
		if err := json.Unmarshal([]byte(ex.Variables), &vars); err != nil {
			t.Errorf("example %d variables: %v", i, err)
			continue
		}
		if _, err := validator.VariableValues(schema, doc.Operations[0], vars); err != nil {
			t.Errorf("example %d variables: %v", i, err)
		}
		if strings.Contains(ex.Variables, "member.added") {
			t.Errorf("example %d filters on member.added, which is no longer recorded (member.joined)", i)
		}
		// The bundle holds each line of the example's text as written.
		for _, line := range strings.Split(ex.Query, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "query ") && !bytes.Contains(bundle, []byte(strings.TrimSpace(line))) {
				t.Errorf("the committed bundle lacks example %d's %q: rebuild it (docs/playground.md)", i, strings.TrimSpace(line))
			}
		}
		for _, line := range strings.Split(ex.Variables, "\n") {
			if l := strings.TrimSpace(line); l != "" && !bytes.Contains(bundle, []byte(l)) {
				t.Errorf("the committed bundle lacks example %d's variables line %q: rebuild it (docs/playground.md)", i, l)
			}
		}
	}
}

func TestRecoverHTTP(t *testing.T) {
	t.Parallel()
	p := newOps(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry()})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /before", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("GET /after", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		panic("boom")
	})
	srv := httptest.NewServer(p.wrap(mux))
	t.Cleanup(srv.Close)

	// A panic before anything is written: a 500 with an INTERNAL GraphQL-style error.
	res, err := srv.Client().Get(srv.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"code":"INTERNAL"`) ||
		strings.Contains(string(body), "boom") {
		t.Fatalf("GET /before = %d %s", res.StatusCode, body)
	}
	// A panic after the answer started: the connection is cut, so the client
	// never takes the truncated answer for a whole one.
	res, err = srv.Client().Get(srv.URL + "/after")
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil {
		t.Fatal("GET /after: truncated answer read without error")
	}
	// The server still serves.
	res, err = srv.Client().Get(srv.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var got string
	for _, line := range gatherText(t, p.reg) {
		if strings.HasPrefix(line, `taskflow_http_requests_total{code="500",method="GET",route="GET /before"}`) {
			got = line
		}
	}
	if !strings.HasSuffix(got, " 2") {
		t.Errorf("500s of /before counted as %q, want 2", got)
	}
}

// gatherText returns the exposition lines of reg.
func gatherText(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	metricsHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return strings.Split(rec.Body.String(), "\n")
}
