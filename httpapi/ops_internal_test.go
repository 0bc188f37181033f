package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/graph"
)

// TestPlaygroundTabsAreValid checks every example of the playground against the
// schema, variables included, so the examples cannot rot.
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
