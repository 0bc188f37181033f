package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/graph"
	"taskflow/querydoc"
	"taskflow/schema"
)

// gqlExamples returns the gql '<json>' calls of a markdown file (one or more
// lines each), with the shell variables spliced in as '$NAME' replaced by NAME.
func gqlExamples(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
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
	spliced := regexp.MustCompile(`'\$([A-Z]+)'`)
	for i, c := range calls {
		calls[i] = spliced.ReplaceAllString(c, "$1")
	}
	return calls
}

// TestDocExamplesAreValid checks every curl example of README.md and
// docs/tour.md against the schema and the server's document limits, so the
// examples cannot drift from the API, and that the tour shows every kind of
// call.
func TestDocExamplesAreValid(t *testing.T) {
	t.Parallel()
	served := schema.Served(graph.NewExecutableSchema(graph.Config{}).Schema())
	documents := querydoc.NewValidator(served, querydoc.DefaultLimits)
	want := map[string][]string{
		"README.md":    {"register", "createWorkspace"},
		"docs/tour.md": {"register", "login", "createWorkspace", "createProject", "createTask", "tasks(", "auditEvents"},
	}
	for path, names := range want {
		calls := gqlExamples(t, path)
		if len(calls) == 0 {
			t.Errorf("no gql examples in %s", path)
		}
		seen := map[string]bool{}
		for _, body := range calls {
			var req struct {
				Query     string         `json:"query"`
				Variables map[string]any `json:"variables"`
			}
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Errorf("%s: example is not JSON: %v\n%s", path, err, body)
				continue
			}
			doc, errs := gqlparser.LoadQuery(served, req.Query)
			if errs != nil {
				t.Errorf("%s: example %q: %v", path, req.Query, errs)
				continue
			}
			if _, err := validator.VariableValues(served, doc.Operations[0], req.Variables); err != nil {
				t.Errorf("%s: example %q variables: %v", path, req.Query, err)
			}
			if doc, _, errs := documents.Prepare(req.Query); errs != nil {
				t.Errorf("%s: example %q is refused by the server's document limits: %v", path, req.Query, errs)
			} else if uses := documents.DeprecatedIn(doc); uses != nil {
				t.Errorf("%s: example %q uses deprecated %v", path, req.Query, uses)
			}
			for _, name := range names {
				if strings.Contains(req.Query, name) {
					seen[name] = true
				}
			}
		}
		for _, name := range names {
			if !seen[name] {
				t.Errorf("%s has no valid example of %s", path, name)
			}
		}
	}
}

// TestDocLinks checks that every relative link of README.md and docs/ points
// at a file of the repository, and every #anchor at a heading of its page
// (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
func TestDocLinks(t *testing.T) {
	t.Parallel()
	pages := []string{"README.md", "bench/README.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s links %s: %s does not exist", page, target, path)
				continue
			}
			if anchor == "" || info.IsDir() {
				continue
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(anchors(string(body)), anchor) {
				t.Errorf("%s links %s: no heading of %s has the anchor #%s", page, target, path, anchor)
			}
		}
	}
}

// anchors returns the GitHub anchors of a markdown page's headings.
func anchors(md string) []string {
	var out []string
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}
