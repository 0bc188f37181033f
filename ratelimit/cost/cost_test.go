package cost_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/ratelimit/cost"
)

// schema is TaskFlow's schema read from schema/*.graphqls (not through the
// generated package, which keeps fuzzing builds small).
var schema = func() *ast.Schema {
	files, err := filepath.Glob("../../schema/*.graphqls")
	if err != nil || len(files) == 0 {
		panic(fmt.Sprintf("schema files: %v", err))
	}
	var srcs []*ast.Source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		srcs = append(srcs, &ast.Source{Name: f, Input: string(b)})
	}
	return gqlparser.MustLoadSchema(srcs...)
}()

// operation validates query and returns its only operation with vars
// coerced as gqlgen does.
func operation(t testing.TB, query string, vars map[string]any) (*ast.OperationDefinition, map[string]any) {
	t.Helper()
	doc, errs := gqlparser.LoadQuery(schema, query)
	if errs != nil {
		t.Fatalf("invalid document: %v", errs)
	}
	op := doc.Operations[0]
	coerced, err := validator.VariableValues(schema, op, vars)
	if err != nil {
		t.Fatalf("variables: %v", err)
	}
	return op, coerced
}

// costOf costs the only operation of query with vars (operation).
func costOf(t testing.TB, query string, vars map[string]any) int64 {
	t.Helper()
	op, coerced := operation(t, query, vars)
	return cost.Operation(schema, op, coerced)
}

func TestCostContractExamples(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		query string
		vars  map[string]any
		want  int64
	}{
		{"object field costs 1, scalars 0", `{ me { id name email } }`, nil, 1},
		{"scalar-only operation is free", `{ __typename }`, nil, 0},
		{"list without first multiplies by its declared size", `{ me { workspaces { id } } }`, nil, 2},
		{"declared size 50 inside declared size 10",
			`{ me { workspaces { members { user { id } } } } }`, nil, 1 + 1 + 10*(1+50*1)},
		{"connection default first 20, sized nodes not multiplied again",
			`{ searchTasks(workspaceId: "w", query: "q") { nodes { id } } }`, nil, 1 + 20*1},
		{"connection with literal first, edges, node and pageInfo",
			`{ searchTasks(workspaceId: "w", query: "q", first: 5) { edges { cursor node { id } } pageInfo { hasNextPage } } }`,
			nil, 1 + 5*((1+1)+1)},
		{"first from a variable", `query($n: Int) { searchTasks(workspaceId: "w", query: "q", first: $n) { nodes { id } } }`,
			map[string]any{"n": 50}, 51},
		{"absent variable falls back to the argument default",
			`query($n: Int) { searchTasks(workspaceId: "w", query: "q", first: $n) { nodes { id } } }`, nil, 21},
		{"variable default applies", `query($n: Int = 3) { searchTasks(workspaceId: "w", query: "q", first: $n) { nodes { id } } }`, nil, 4},
		{"audit default first 50", `{ auditEvents(workspaceId: "w") { nodes { actor { id } } } }`, nil, 1 + 50*(1+1)},
		{"nested connections multiply",
			`{ project(id: "p") { tasks(first: 10) { nodes { comments(first: 10) { nodes { author { id } } } } } } }`,
			nil, 1 + (1 + 10*(1+(1+10*(1+1))))},
		{"aliases count every time", `{ a: me { id } b: me { id } c: me { id } }`, nil, 3},
		{"fragments count every time they are spread",
			`{ ...F a: me { ...U } } fragment F on Query { me { ...U } } fragment U on User { workspaces { id } }`, nil, 2 * (1 + 1)},
		{"inline fragments", `{ me { ... on User { workspaces { id } } } }`, nil, 2},
		{"mutation field costs 10 plus its selection",
			`mutation { createTask(input: {projectId: "p", title: "t"}) { id project { id } } }`, nil, 10 + 1},
		{"mutation with a scalar result", `mutation { logout }`, nil, 10},
		{"two mutation fields", `mutation { a: logout b: login(email: "e", password: "p") { token user { id } } }`, nil, 10 + 10 + 1},
		{"introspection costs a fixed 10", `{ __schema { types { name fields { name type { name } } } } }`, nil, 10},
		{"__type too, and each alias", `{ a: __type(name: "Task") { name } b: __schema { queryType { name } } }`, nil, 20},
		{"rateLimit is an object", `{ rateLimit { cost remaining } }`, nil, 1},
		{"huge first is charged in full", `{ searchTasks(workspaceId: "w", query: "q", first: 1000000) { nodes { id } } }`, nil, 1000001},
		{"negative first charges the field only", `{ searchTasks(workspaceId: "w", query: "q", first: -5) { nodes { id } } }`, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := costOf(t, c.query, c.vars); got != c.want {
				t.Errorf("cost = %d, want %d", got, c.want)
			}
		})
	}
}

func TestCostSaturates(t *testing.T) {
	t.Parallel()
	// Nested connections of 1e9 each would wrap int64 several times over.
	q := `query($n: Int) { project(id: "p") { tasks(first: $n) { nodes { comments(first: $n) { nodes { task { comments(first: $n) { nodes { task { comments(first: $n) { nodes { id author { id } } } } } } } } } } } } }`
	got := costOf(t, q, map[string]any{"n": 2000000000})
	if got <= 0 || got < 1<<60 {
		t.Fatalf("cost = %d, want a saturated positive cost", got)
	}
}

// doubling returns a document of n fragments each spreading the next twice.
func doubling(n int) string {
	var b strings.Builder
	b.WriteString("query { ...F0 }\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "fragment F%d on Query { a%d: me { id } ...F%d ...F%d }\n", i, i, i+1, i+1)
	}
	fmt.Fprintf(&b, "fragment F%d on Query { me { id } }\n", n)
	return b.String()
}

func TestCostFragmentDoublingIsMemoised(t *testing.T) {
	t.Parallel()
	// 2^60 expansions: only a memoised walk finishes; the cost saturates.
	got := costOf(t, doubling(60), nil)
	if got < 1<<60 {
		t.Fatalf("cost = %d, want saturated", got)
	}
	if got := costOf(t, doubling(4), nil); got != (1<<4)-1+(1<<4) {
		// Level i has 2^i copies each selecting one aliased me (2^0+..+2^3 = 15)
		// and the leaf fragment 2^4 copies of me.
		t.Fatalf("cost(doubling(4)) = %d, want %d", got, (1<<4)-1+(1<<4))
	}
}

// A subscription costs its root fields' @cost weight (10) plus its selection
// when it starts; each event costs the selection with the root field as an
// object (1), as a query would.
func TestSubscriptionAndEventCost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		query               string
		subscribe, perEvent int64
	}{
		{`subscription { taskChanges(projectId: "p") { cursor action } }`, 10, 1},
		{`subscription { taskChanges(projectId: "p") { task { title project { name } } actor { id } } }`, 13, 4},
		{`subscription { auditEventAdded(workspaceId: "w") { event { actor { id } } } }`, 12, 3},
		{`subscription { taskChanges(projectId: "p") { task { comments(first: 5) { nodes { body } } } } }`, 17, 8},
	}
	for _, c := range cases {
		doc, errs := gqlparser.LoadQuery(schema, c.query)
		if errs != nil {
			t.Fatalf("%s: %v", c.query, errs)
		}
		op := doc.Operations[0]
		if got := cost.Operation(schema, op, nil); got != c.subscribe {
			t.Errorf("%s: subscribe costs %d, want %d", c.query, got, c.subscribe)
		}
		if got := cost.Event(op, nil); got != c.perEvent {
			t.Errorf("%s: an event costs %d, want %d", c.query, got, c.perEvent)
		}
	}
}

// An explicit null first (written in the document, or a variable sent as
// null) reaches the resolver as no first at all, so the page it returns is the
// argument's default (store: 20 tasks, 50 audit events), and the cost must
// multiply by that default, not by DefaultListSize.
func TestCostNullFirstIsTheArgumentDefault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		query string
		vars  map[string]any
		want  int64
	}{
		{"literal null", `{ auditEvents(workspaceId: "w", first: null) { nodes { actor { id } } } }`, nil, 1 + 50*(1+1)},
		{"variable sent as null", `query($n: Int) { auditEvents(workspaceId: "w", first: $n) { nodes { actor { id } } } }`,
			map[string]any{"n": nil}, 1 + 50*(1+1)},
		{"nested literal nulls",
			`{ project(id: "p") { tasks(first: null) { nodes { comments(first: null) { nodes { author { id } } } } } } }`,
			nil, 1 + (1 + 20*(1+(1+20*(1+1))))},
		{"a variable whose default is null",
			`query($n: Int = null) { searchTasks(workspaceId: "w", query: "q", first: $n) { nodes { id } } }`, nil, 1 + 20*1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := costOf(t, c.query, c.vars); got != c.want {
				t.Errorf("cost = %d, want %d", got, c.want)
			}
		})
	}
}

// fieldNamed returns the first field called name in op's selection, depth first.
func fieldNamed(set ast.SelectionSet, name string) *ast.Field {
	for _, sel := range set {
		if f, ok := sel.(*ast.Field); ok {
			if f.Name == name {
				return f
			}
			if g := fieldNamed(f.SelectionSet, name); g != nil {
				return g
			}
		}
	}
	return nil
}

// A list priced by its declared size costs, once it returned more items, the
// cost of its selection for each item past that size; a list within its
// size, a list of scalars and a connection (priced by first) cost nothing
// more.
func TestOverrun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, query, field string
		vars               map[string]any
		n                  int
		want               int64
	}{
		{"workspaces past 10", `{ me { workspaces { members { user { id } } } } }`, "workspaces", nil, 12, 2 * (1 + 50*1)},
		{"workspaces within 10", `{ me { workspaces { members { user { id } } } } }`, "workspaces", nil, 10, 0},
		{"fewer than declared: no refund", `{ me { workspaces { members { user { id } } } } }`, "workspaces", nil, 3, 0},
		{"members past 50", `{ me { workspaces { members { user { id } } } } }`, "members", nil, 60, 10 * 1},
		{"scalars only cost nothing", `{ me { workspaces { id name } } }`, "workspaces", nil, 1000, 0},
		{"a connection in the item, first from a variable",
			`query($n: Int) { me { workspaces { projects(first: $n) { nodes { id } } } } }`, "workspaces",
			map[string]any{"n": 5}, 11, 1 + 5},
		{"a connection never overruns", `{ searchTasks(workspaceId: "w", query: "q") { nodes { id } } }`, "searchTasks", nil, 500, 0},
		{"nor does membersConnection", `{ workspace(id: "w") { membersConnection(first: 100) { nodes { user { name } } } } }`,
			"membersConnection", nil, 100, 0},
		{"nor workspacesConnection", `{ me { workspacesConnection { nodes { members { user { id } } } } } }`,
			"workspacesConnection", nil, 20, 0},
		{"huge counts saturate", `{ me { workspaces { members { user { id } } } } }`, "workspaces", nil, 1 << 62, cost.Saturated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			op, vars := operation(t, c.query, c.vars)
			f := fieldNamed(op.SelectionSet, c.field)
			if got := cost.Overrun(f, vars, c.n); got != c.want {
				t.Errorf("Overrun(%s, %d) = %d, want %d", c.field, c.n, got, c.want)
			}
		})
	}
	if got := cost.Overrun(nil, nil, 100); got != 0 {
		t.Errorf("Overrun(nil) = %d", got)
	}
}

// maxQueryCost is MAX_QUERY_COST's default (ratelimit.Config.MaxCost).
const maxQueryCost = 1000

// A page of 100 members with their user costs what a page of 100 of any
// connection costs, whatever the workspace's size: 1 for the connection and 2
// for each member and its user, so 202 with the workspace (302 with
// pageInfo, which the connection's first multiplies too), far below the
// default MAX_QUERY_COST, and 10,000 members are read in 100 such
// operations. The deprecated members list is priced at 50 members, and once
// read it is charged for the rest, which takes a list of 10,000 (or of about
// 1,000) over MAX_QUERY_COST. workspacesConnection is priced by first the
// same way.
func TestMemberAndWorkspacePagesCost(t *testing.T) {
	t.Parallel()
	const page = `query($after: String) { workspace(id: "w") {
		membersConnection(first: 100, after: $after) { nodes { user { name } } pageInfo { hasNextPage endCursor } } } }`
	op, vars := operation(t, page, map[string]any{"after": "c"})
	got := cost.Operation(schema, op, vars)
	if want := int64(1 + 1 + 100*((1+1)+1)); got != want || got > maxQueryCost {
		t.Errorf("a page of 100 members with pageInfo costs %d, want %d (at most %d)", got, want, maxQueryCost)
	}
	if got := costOf(t, `{ workspace(id: "w") { membersConnection(first: 100) { nodes { user { name } } } } }`, nil); got != 1+1+100*(1+1) {
		t.Errorf("a page of 100 members costs %d, want %d", got, 1+1+100*(1+1))
	}
	if f := fieldNamed(op.SelectionSet, "membersConnection"); cost.Overrun(f, vars, 100) != 0 {
		t.Errorf("a full page of members overruns")
	}
	if got := costOf(t, `{ workspace(id: "w") { membersConnection { edges { cursor node { role } } } } }`, nil); got != 1+1+20*(1+1) {
		t.Errorf("a default page of members costs %d, want %d", got, 1+1+20*(1+1))
	}
	if got := costOf(t, `{ me { workspacesConnection(first: 50) { nodes { id name viewerRole } } } }`, nil); got != 1+1+50*1 {
		t.Errorf("a page of 50 workspaces costs %d, want %d", got, 1+1+50*1)
	}

	const list = `{ workspace(id: "w") { members { user { name } } } }`
	op, vars = operation(t, list, nil)
	priced := cost.Operation(schema, op, vars)
	if priced != 1+1+50*1 {
		t.Errorf("the deprecated members list is priced %d, want %d", priced, 1+1+50*1)
	}
	f := fieldNamed(op.SelectionSet, "members")
	for _, n := range []int{1000, 10000} {
		if total := priced + cost.Overrun(f, vars, n); total <= maxQueryCost {
			t.Errorf("the deprecated list of %d members costs %d once read, want over %d", n, total, maxQueryCost)
		}
	}
}

// wideIntrospection selects every field of every type k times, by aliases:
// a document of a few KB whose answer is k times the schema's fields.
func wideIntrospection(k int) string {
	var b strings.Builder
	b.WriteString("{ __schema { types { ...A } } }\nfragment A on __Type {")
	for i := 0; i < k; i++ {
		fmt.Fprintf(&b, " f%d: fields { ...F }", i)
	}
	b.WriteString(" }\nfragment R on __Type { name kind ofType { name kind ofType { name kind ofType { name } } } }\n")
	b.WriteString("fragment F on __Field { name description args { name description type { ...R } defaultValue } type { ...R } isDeprecated deprecationReason }\n")
	return b.String()
}

// Introspection is priced by the fields it resolves: GraphiQL's query (and
// any of its size) costs 10 as documented, but aliases that resolve the
// schema's fields 64 times over cost what they resolve, not 10 (they were a
// fixed 10 for 5 MB of answer and 0.6 s of CPU).
func TestIntrospectionIsPricedByTheFieldsItResolves(t *testing.T) {
	for _, c := range []struct {
		name, query string
		want        int64
	}{
		{"GraphiQL", introspection.Query, cost.IntrospectionCost},
		{"GraphiQL with isOneOf", introspection.NewQuery(introspection.QueryOptions{OneOf: true}), cost.IntrospectionCost},
		{"__type", `{ __type(name: "Task") { name fields { name type { name kind ofType { name kind ofType { name } } } } } }`, 10},
		{"unknown __type", `{ __type(name: "Nope") { fields { name } } }`, 10},
		{"aliased __schema", `{ a: __schema { queryType { name } } b: __schema { queryType { name } } }`, 20},
		{"one alias", wideIntrospection(1), 10},
	} {
		if got := costOf(t, c.query, nil); got != c.want {
			t.Errorf("%s: cost %d, want %d", c.name, got, c.want)
		}
	}
	// The standard query keeps room for the schema to grow.
	op, vars := operation(t, introspection.Query, nil)
	if got := cost.Operation(schema, op, vars); got != cost.IntrospectionCost {
		t.Fatalf("GraphiQL's query: %d", got)
	}
	// 64 aliases resolve about 64 times the fields of one: each point past
	// IntrospectionFields pays for IntrospectionFieldsPerPoint of them.
	one := costOf(t, wideIntrospection(1), nil)
	wide := costOf(t, wideIntrospection(64), nil)
	if one != 10 || wide <= 1000 {
		t.Fatalf("64 aliases of every field of every type cost %d (one alias %d): want over MAX_QUERY_COST", wide, one)
	}
	// The variable of __type is resolved, and a type's fields counted.
	byVar := costOf(t, `query($n: String!) { __type(name: $n) { fields { name } } }`, map[string]any{"n": "Mutation"})
	if byVar != 10 {
		t.Fatalf("__type by variable: %d", byVar)
	}
	// Counting is bounded: 256 aliases of the schema's fields (refused) are
	// priced in a bounded number of steps, at saturation or beyond any budget.
	if got := costOf(t, wideIntrospection(256), nil); got <= 10_000 {
		t.Fatalf("256 aliases cost %d", got)
	}
}

// Check finds the first slicing argument out of its range on a field the
// operation would run (a literal or a variable; a fragment where it is
// spread, memoised or not; never a default, a null, or a selection @skip
// or @include leaves out) and prices the operation as Operation does.
func TestCheckFindsSlicingArgumentsOutOfRange(t *testing.T) {
	t.Parallel()
	pages := &cost.Range{Min: 1, Max: 100}
	const frag = ` fragment f on Project { tasks(first: 0) { nodes { id } } }`
	for _, c := range []struct {
		query string
		vars  map[string]any
		bad   int64 // 0: none found
		line  int
	}{
		{`{ me { workspacesConnection(first: 101) { nodes { id } } } }`, nil, 101, 1},
		{`query($n: Int) { me { workspacesConnection(first: $n) { nodes { id } } } }`, map[string]any{"n": -1}, -1, 1},
		{`query($n: Int) { me { workspacesConnection(first: $n) { nodes { id } } } }`, map[string]any{"n": nil}, 0, 0},
		{`{ me { workspacesConnection { nodes { id } } } }`, nil, 0, 0},
		{`{ me { workspacesConnection(first: 100) { nodes { projects(first: 1) { nodes { id } } } } } }`, nil, 0, 0},
		{`{ me { workspacesConnection(first: 100) { nodes { projects(first: 1000) { nodes { id } } } } } }`, nil, 1000, 1},
		{"query($p: ID!) { project(id: $p) { ...f } }" + frag, map[string]any{"p": "x"}, 0, 1},
		{"query($p: ID!) { a: project(id: $p) { ...f @skip(if: true) } b: project(id: $p) { ...f } }" + frag, map[string]any{"p": "x"}, 0, 1},
		{"query($p: ID!) { a: project(id: $p) { ...f @skip(if: true) } b: project(id: $p) { ...f @include(if: false) } }" + frag, map[string]any{"p": "x"}, 0, 0},
		{`query($s: Boolean!) { me { workspacesConnection(first: 0) @skip(if: $s) { nodes { id } } } }`, map[string]any{"s": true}, 0, 0},
		{`query($s: Boolean!) { me { workspacesConnection(first: 0) @skip(if: $s) { nodes { id } } } }`, map[string]any{"s": false}, 0, 1},
		{`{ me { ... @include(if: false) { workspacesConnection(first: 0) { nodes { id } } } } }`, nil, 0, 0},
	} {
		op, vars := operation(t, c.query, c.vars)
		price, bad := cost.Check(schema, op, vars, pages)
		if want := cost.Operation(schema, op, vars); price != want {
			t.Errorf("%s: priced %d, Operation %d", c.query, price, want)
		}
		switch {
		case c.line == 0 && bad != nil:
			t.Errorf("%s: found %+v, want nothing", c.query, bad)
		case c.line > 0 && (bad == nil || bad.Argument != "first" || (c.bad != 0 && bad.Value != c.bad) ||
			bad.Position == nil || bad.Position.Line != c.line || bad.Range != *pages):
			t.Errorf("%s: found %+v, want first %d", c.query, bad, c.bad)
		}
		if _, bad := cost.Check(schema, op, vars, nil); bad != nil {
			t.Errorf("%s: found %+v with no range", c.query, bad)
		}
	}
}
