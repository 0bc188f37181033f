package querydoc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// specCase is one case of gqlparser's validator spec tests (imported from
// graphql-js): a document, and the schema it is validated against.
type specCase struct {
	Name   string `yaml:"name"`
	Rule   string `yaml:"rule"`
	Schema string `yaml:"schema"`
	Query  string `yaml:"query"`
}

// specCases reads the spec tests from gqlparser's module, as the module
// cache holds it; it skips t when they cannot be found.
func specCases(t *testing.T) (cases []specCase, schemas map[string]*ast.Schema) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/vektah/gqlparser/v2").Output()
	if err != nil {
		t.Skipf("cannot locate gqlparser's module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "validator", "imported", "spec")
	files, _ := filepath.Glob(filepath.Join(dir, "*.spec.yml"))
	if len(files) == 0 {
		t.Skipf("no spec tests in %s", dir)
	}
	var rawSchemas []string
	readYAML(t, filepath.Join(dir, "schemas.yml"), &rawSchemas)
	schemas = map[string]*ast.Schema{}
	for i, s := range rawSchemas {
		schemas[strconv.Itoa(i)] = gqlparser.MustLoadSchema(&ast.Source{Name: fmt.Sprintf("schemas.yml[%d]", i), Input: s})
	}
	for _, f := range files {
		var cs []specCase
		readYAML(t, f, &cs)
		for _, c := range cs {
			if _, ok := schemas[c.Schema]; !ok {
				s, err := gqlparser.LoadSchema(&ast.Source{Name: c.Name, Input: c.Schema})
				if err != nil {
					continue // a schema-language case, not a document's
				}
				schemas[c.Schema] = s
			}
			c.Name = strings.TrimSuffix(filepath.Base(f), ".spec.yml") + "/" + c.Name
			cases = append(cases, c)
		}
	}
	return cases, schemas
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// eachSpecCase calls f with each spec case whose query is a document: its
// schema, the document parsed afresh, and gqlparser's errors on it.
func eachSpecCase(t *testing.T, f func(c specCase, schema *ast.Schema, doc *ast.QueryDocument, want gqlerror.List)) {
	t.Helper()
	cases, schemas := specCases(t)
	for _, c := range cases {
		schema := schemas[c.Schema]
		doc, err := parser.ParseQuery(&ast.Source{Input: c.Query})
		if err != nil {
			continue // a schema-language case
		}
		want := validator.ValidateWithRules(schema, doc, rules.NewDefaultRules())
		doc, _ = parser.ParseQuery(&ast.Source{Input: c.Query}) // afresh: validation annotates it
		f(c, schema, doc, want)
	}
}

// TestSpecCasesGetGqlparsersErrors validates every document of the spec
// tests both ways: Prepare (but for its "no operation provided", which is
// gqlgen's) must give exactly gqlparser's errors (message,
// locations, order): they are small, so a failing one is validated again by
// gqlparser's rules, and a passing one must pass both. None may hit a limit.
func TestSpecCasesGetGqlparsersErrors(t *testing.T) {
	t.Parallel()
	compared := 0
	eachSpecCase(t, func(c specCase, schema *ast.Schema, doc *ast.QueryDocument, want gqlerror.List) {
		_, got := NewValidator(schema, DefaultLimits).Validate(c.Query, doc)
		if diff := diffErrors(want, got); diff != "" {
			t.Errorf("%s: %s\n%s", c.Name, diff, c.Query)
		}
		compared++
	})
	if compared < 400 {
		t.Fatalf("only %d spec cases compared", compared)
	}
}

// TestSpecCasesLinearRulesAgree validates every document of the spec tests
// with the linear rules alone (what a document too large for gqlparser's
// rules gets): each rule must report the same errors as gqlparser's, but for
// the "Did you mean" suggestions, which the linear rules leave out, and the
// merging rule, which must find a conflict exactly when gqlparser's does
// (in a document without fragment cycles).
func TestSpecCasesLinearRulesAgree(t *testing.T) {
	t.Parallel()
	overlapCases := 0
	eachSpecCase(t, func(c specCase, schema *ast.Schema, doc *ast.QueryDocument, want gqlerror.List) {
		shape := Measure(doc, 0)
		got := NewValidator(schema, DefaultLimits).validate(doc, &shape)
		wantRest, wantOverlap := splitOverlap(want)
		gotRest, gotOverlap := splitOverlap(got)
		if diff := diffErrors(withoutSuggestions(wantRest), withoutSuggestions(gotRest)); diff != "" {
			t.Errorf("%s: %s\n%s", c.Name, diff, c.Query)
		}
		// A document with a fragment cycle is refused by NoFragmentCycles;
		// the linear rule does not expand it (its expansion is infinite).
		if wantOverlap != gotOverlap && !shape.Cycle {
			t.Errorf("%s: gqlparser finds a conflict: %v, the linear rule: %v\n%s\ngqlparser: %v\nlinear: %v",
				c.Name, wantOverlap, gotOverlap, c.Query, want, got)
		}
		if strings.HasPrefix(c.Name, "OverlappingFieldsCanBeMergedRule/") {
			overlapCases++
		}
	})
	if overlapCases < 40 {
		t.Fatalf("only %d cases of OverlappingFieldsCanBeMerged compared", overlapCases)
	}
}

// splitOverlap returns the errors of other rules than field merging, and
// whether there was one of field merging.
func splitOverlap(list gqlerror.List) (rest gqlerror.List, overlap bool) {
	for _, e := range list {
		if e.Rule == overlapRuleName {
			overlap = true
			continue
		}
		rest = append(rest, e)
	}
	return rest, overlap
}

// withoutSuggestions strips the "Did you mean" of each message and the
// "WithoutSuggestions" of each rule name.
func withoutSuggestions(list gqlerror.List) gqlerror.List {
	out := make(gqlerror.List, len(list))
	for i, e := range list {
		c := *e
		if j := strings.Index(c.Message, " Did you mean"); j >= 0 {
			c.Message = c.Message[:j]
		}
		c.Rule = strings.TrimSuffix(c.Rule, "WithoutSuggestions")
		out[i] = &c
	}
	return out
}

// diffErrors describes how got differs from want (messages, locations and
// rules, in order), or returns "".
func diffErrors(want, got gqlerror.List) string {
	describe := func(l gqlerror.List) string {
		var b strings.Builder
		for _, e := range l {
			fmt.Fprintf(&b, "  %s %v [%s]\n", e.Message, e.Locations, e.Rule)
		}
		return b.String()
	}
	w, g := describe(want), describe(got)
	if w == g {
		return ""
	}
	return "errors differ\nwant:\n" + w + "got:\n" + g
}
