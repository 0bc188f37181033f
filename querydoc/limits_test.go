package querydoc

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"taskflow/graph"
	"taskflow/schema"
)

var taskflowSchema = graph.NewExecutableSchema(graph.Config{}).Schema()

// playgroundQueries returns the queries of the playground's example tabs
// (web/playground/src/examples.js), with the shared event fields spliced in.
func playgroundQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../web/playground/src/examples.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	fields := regexp.MustCompile("const eventFields = `([^`]*)`").FindStringSubmatch(src)
	if fields == nil {
		t.Fatal("examples.js: no eventFields")
	}
	var out []string
	for _, m := range regexp.MustCompile("query: `([^`]*)`").FindAllStringSubmatch(src, -1) {
		out = append(out, regexp.MustCompile(`\$\{eventFields[^}]*\}`).ReplaceAllLiteralString(m[1], fields[1]))
	}
	if len(out) < 5 {
		t.Fatalf("examples.js: %d queries found", len(out))
	}
	return out
}

// TestDefaultLimitsAdmitRealDocuments checks that the standard introspection
// query (what GraphiQL sends, isOneOf included) and every playground example
// are valid and stay within half of every limit.
func TestDefaultLimitsAdmitRealDocuments(t *testing.T) {
	t.Parallel()
	docs := append([]string{introspection.NewQuery(introspection.QueryOptions{OneOf: true})}, playgroundQueries(t)...)
	v := NewValidator(taskflowSchema, DefaultLimits)
	l := DefaultLimits
	for _, q := range docs {
		_, s, errs := v.Prepare(q)
		if errs != nil {
			t.Fatalf("refused: %v\n%s", errs, q)
		}
		for _, c := range []struct {
			name         string
			value, limit int
		}{
			{"walk", s.Walk, l.Walk}, {"selections", s.Selections, l.Selections}, {"depth", s.Depth, l.Depth},
			{"aliases", s.Aliases, l.Aliases}, {"directives", s.Directives, l.Directives},
			{"variables", s.Variables, l.Variables},
		} {
			if c.value*2 > c.limit {
				t.Errorf("%s is %d, over half its limit %d:\n%s", c.name, c.value, c.limit, q)
			}
		}
		t.Logf("%+v", s)
	}
}

// TestLimitsRefuseOneOverAndAdmitTheLimit checks each limit with a document
// at it and one just over it.
func TestLimitsRefuseOneOverAndAdmitTheLimit(t *testing.T) {
	t.Parallel()
	typenames := func(n int) string { return "{" + strings.Repeat(" __typename", n) + " }" }
	aliases := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, " a%d: __typename", i)
		}
		return "{" + b.String() + " }"
	}
	nested := func(n int) string { // me { workspaces { members { user { workspaces ... __typename
		path := []string{"me"}
		for cycle := []string{"workspaces", "members", "user"}; len(path) < n-1; {
			path = append(path, cycle[(len(path)-1)%3])
		}
		return "{ " + strings.Join(path, " { ") + " { __typename" + strings.Repeat(" }", len(path)) + " }"
	}
	directives := func(n int) string {
		return "{ __typename" + strings.Repeat(" @include(if: true)", n-1) + " @skip(if: false) }"
	}
	variables := func(n int) string {
		var defs, uses strings.Builder
		for i := range n {
			fmt.Fprintf(&defs, " $v%d: ID!", i)
			fmt.Fprintf(&uses, " t%d: task(id: $v%d) { id }", i, i)
		}
		return "query(" + defs.String() + ") {" + uses.String() + " }"
	}
	spreads := func(n int) string { // a fragment spread n times: n fields with fragments expanded
		return "{" + strings.Repeat(" ...F", n) + " } fragment F on Query { __typename }"
	}
	cases := []struct {
		limit  string
		limits Limits
		at     func(n int) string
		n      int
	}{
		{"walk", Limits{Walk: 20}, typenames, 20 - 1},
		{"selections", Limits{Selections: 50}, typenames, 50},
		{"selections", Limits{Selections: 50}, spreads, 50},
		{"depth", Limits{Depth: 6}, nested, 6},
		{"aliases", Limits{Aliases: 30}, aliases, 30},
		{"directives", Limits{Directives: 2}, directives, 2},
		{"variables", Limits{Variables: 5}, variables, 5},
	}
	for _, c := range cases {
		v := NewValidator(taskflowSchema, c.limits)
		if _, _, errs := v.Prepare(c.at(c.n)); errs != nil {
			t.Errorf("%s: at the limit: %v\n%s", c.limit, errs, c.at(c.n))
		}
		_, _, errs := v.Prepare(c.at(c.n + 1))
		if len(errs) != 1 || errs[0].Extensions["limit"] != c.limit || errs[0].Extensions["code"] != "QUERY_TOO_COSTLY" ||
			!strings.Contains(errs[0].Message, "limit") {
			t.Errorf("%s: one over the limit: %v\n%s", c.limit, errs, c.at(c.n+1))
		}
	}
}

// TestMeasure checks what Measure counts on documents small enough to
// count by hand.
func TestMeasure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		query string
		want  Shape
	}{
		// The operation, a: me, id, b: me, @include, if:, true, id, name.
		{`{ a: me { id } b: me @include(if: true) { id name } }`, Shape{
			Nodes: 9, Walk: 9, Selections: 5, Depth: 2, Aliases: 2, Directives: 1}},
		// F is spread twice by Q and once through G by R: its 2 fields are
		// expanded 3 times; its 3 nodes are walked once by each operation,
		// once by G and once on its own.
		{`query Q { me { ...F } x: me { ...F } } query R { ...G } fragment F on User { id name } ` +
			`fragment G on Query { me { ...F } }`, Shape{
			Nodes: 13, Walk: 25, Selections: 9, Depth: 2, Aliases: 1}},
		// Variables with their defaults and directives, the list's items, and
		// the comment (it is kept with the second operation).
		{`query($a: ID, $b: ID = "1" @deprecated) { task(id: $a) { id } } # one comment
		  query($c: [ID] = ["1", "2"]) { __typename }`, Shape{
			Nodes: 16, Walk: 16, Selections: 3, Depth: 2, Variables: 2, Directives: 1}},
		// A cycle: gqlparser's walker enters the fragment it starts from
		// once more (walk 8 + 9 + 9); the expansion stops at the cycle.
		{`{ ...A } fragment A on Query { me { ...B } } fragment B on User { workspaces { ...A } }`, Shape{
			Nodes: 8, Walk: 26, Selections: 2, Depth: 3, Cycle: true}},
	}
	for _, c := range cases {
		doc, err := parser.ParseQuery(&ast.Source{Input: c.query})
		if err != nil {
			t.Fatal(err)
		}
		if got := Measure(doc, 0); got != c.want {
			t.Errorf("%s\ngot  %+v\nwant %+v", c.query, got, c.want)
		}
	}
}

// TestWalkStopsAtTheLimit checks that Measure stops counting the walk of a
// chain of fragments (each spreading the next: the walk is the square of the
// chain) once it passes the limit, so Measure stays linear.
func TestWalkStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	const n = 3000
	var b strings.Builder
	b.WriteString("{ ...F0 }")
	for i := range n {
		fmt.Fprintf(&b, " fragment F%d on Query { __typename ...F%d }", i, i+1)
	}
	fmt.Fprintf(&b, " fragment F%d on Query { __typename }", n)
	doc, err := parser.ParseQuery(&ast.Source{Input: b.String()})
	if err != nil {
		t.Fatal(err)
	}
	full := Measure(doc, 0).Walk
	if full < n*n/2 {
		t.Fatalf("the full walk is %d: the document is not the square it should be", full)
	}
	if got := Measure(doc, 1000).Walk; got <= 1000 || got > 1000+n {
		t.Fatalf("the walk with limit 1000 is %d", got)
	}
}

// TestErrorsAreCapped checks that a document with more errors than
// maxErrors gets maxErrors of them and one that says so.
func TestErrorsAreCapped(t *testing.T) {
	t.Parallel()
	_, _, errs := NewValidator(taskflowSchema, DefaultLimits).Prepare("{" + strings.Repeat(" nope", 500) + " }")
	if len(errs) != maxErrors+1 || !strings.HasPrefix(errs[maxErrors].Message, "Too many validation errors") {
		t.Fatalf("%d errors, the last: %v", len(errs), errs[len(errs)-1])
	}
	for _, e := range errs {
		if e.Extensions["code"] != "GRAPHQL_VALIDATION_FAILED" {
			t.Fatalf("code: %v", e.Extensions)
		}
	}
}

// TestUnservedDirectivesGetTheirReason checks that @defer, absent from the
// served schema, is refused with schema.Unserved's reason (not "Unknown
// directive") by the linear rules of a large document as by gqlparser's own
// rules of a small one, once for each use.
func TestUnservedDirectivesGetTheirReason(t *testing.T) {
	t.Parallel()
	v := NewValidator(schema.Served(taskflowSchema), DefaultLimits)
	small := `{ me { id ... @defer { name } } }`
	large := "# " + strings.Repeat("x", smallBytes) + "\n" + `{ me { id ... @defer { name } ... @defer { email } } }`
	for query, n := range map[string]int{small: 1, large: 2} {
		_, _, errs := v.Prepare(query)
		if len(errs) != n {
			t.Fatalf("%d errors, want %d: %v", len(errs), n, errs)
		}
		for _, e := range errs {
			if e.Message != schema.Unserved["defer"] || e.Extensions["code"] != "GRAPHQL_VALIDATION_FAILED" {
				t.Errorf("%.40s: %v", query, e)
			}
		}
	}
	// The generated schema, @defer in it, still validates it.
	if _, _, errs := NewValidator(taskflowSchema, DefaultLimits).Prepare(small); errs != nil {
		t.Errorf("with @defer in the schema: %v", errs)
	}
}
