package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/graph"
	"taskflow/querydoc"
)

// TestReadmeExamplesAreValid checks every curl example of README.md against the
// schema and the server's document limits, so the examples cannot drift from
// the API.
func TestReadmeExamplesAreValid(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Each example is gql '<json>' over one or more lines; shell variables are
	// spliced in as '$NAME'.
	var calls []string
	var cur []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "gql '") {
			cur = []string{strings.TrimPrefix(line, "gql '")}
		} else if cur != nil {
			cur = append(cur, line)
		}
		if cur != nil && strings.HasSuffix(line, "'") {
			calls = append(calls, strings.TrimSuffix(strings.Join(cur, "\n"), "'"))
			cur = nil
		}
	}
	if len(calls) == 0 {
		t.Fatal("no gql examples in README.md")
	}
	spliced := regexp.MustCompile(`'\$([A-Z]+)'`)
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	documents := querydoc.NewValidator(schema, querydoc.DefaultLimits)
	seen := map[string]bool{}
	for _, c := range calls {
		body := spliced.ReplaceAllString(c, "$1")
		var req struct {
			Query     string         `json:"query"`
			Variables map[string]any `json:"variables"`
		}
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Errorf("example is not JSON: %v\n%s", err, body)
			continue
		}
		doc, errs := gqlparser.LoadQuery(schema, req.Query)
		if errs != nil {
			t.Errorf("example %q: %v", req.Query, errs)
			continue
		}
		if _, err := validator.VariableValues(schema, doc.Operations[0], req.Variables); err != nil {
			t.Errorf("example %q variables: %v", req.Query, err)
		}
		if _, _, errs := documents.Prepare(req.Query); errs != nil {
			t.Errorf("example %q is refused by the server's document limits: %v", req.Query, errs)
		}
		for _, name := range []string{"register", "login", "createWorkspace", "createProject", "createTask", "tasks(", "auditEvents"} {
			if strings.Contains(req.Query, name) {
				seen[name] = true
			}
		}
	}
	for _, name := range []string{"register", "login", "createWorkspace", "createProject", "createTask", "tasks(", "auditEvents"} {
		if !seen[name] {
			t.Errorf("README has no valid example of %s", name)
		}
	}
}
