package idempotency

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/errs"
	"taskflow/graph"
)

var schema = graph.NewExecutableSchema(graph.Config{}).Schema()

// fp fingerprints the first root field of a mutation document with JSON variables,
// the way gqlgen reads them (numbers kept as json.Number, then coerced).
func fp(t *testing.T, query, vars string) string {
	t.Helper()
	doc, errs := gqlparser.LoadQuery(schema, query)
	if errs != nil {
		t.Fatalf("%s: %v", query, errs)
	}
	raw := map[string]any{}
	if vars != "" {
		dec := json.NewDecoder(bytes.NewBufferString(vars))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
	}
	op := doc.Operations[0]
	coerced, err := validator.VariableValues(schema, op, raw)
	if err != nil {
		t.Fatalf("variables: %v", err)
	}
	field := op.SelectionSet[0].(*ast.Field)
	sum, ferr := Fingerprint(schema, field, coerced)
	if ferr != nil {
		t.Fatal(ferr)
	}
	return string(sum)
}

func TestFingerprintIgnoresPresentation(t *testing.T) {
	t.Parallel()
	base := fp(t, `mutation { createTask(input: {projectId: "p1", title: "T", priority: HIGH}, idempotencyKey: "k") { id } }`, "")
	same := map[string][2]string{
		"variables": {`mutation($in: CreateTaskInput!) { createTask(input: $in, idempotencyKey: "k") { id } }`,
			`{"in": {"title": "T", "priority": "HIGH", "projectId": "p1"}}`},
		"nested variables": {`mutation($t: String!, $p: TaskPriority) { createTask(input: {title: $t, projectId: "p1", priority: $p}) { id } }`,
			`{"p": "HIGH", "t": "T"}`},
		"field order":       {`mutation { createTask(idempotencyKey: "k", input: {priority: HIGH, title: "T", projectId: "p1"}) { id } }`, ""},
		"alias":             {`mutation { made: createTask(input: {projectId: "p1", title: "T", priority: HIGH}) { id } }`, ""},
		"selection set":     {`mutation { createTask(input: {projectId: "p1", title: "T", priority: HIGH}) { id title createdAt status } }`, ""},
		"other key":         {`mutation($k: String) { createTask(input: {projectId: "p1", title: "T", priority: HIGH}, idempotencyKey: $k) { id } }`, `{"k": "other"}`},
		"explicit defaults": {`mutation { createTask(input: {projectId: "p1", title: "T", priority: HIGH, status: TODO}) { id } }`, ""},
		"ID as int in variables": {`mutation($p: ID!) { createTask(input: {projectId: $p, title: "T", priority: HIGH}) { id } }`,
			`{"p": "p1"}`},
	}
	for name, c := range same {
		if got := fp(t, c[0], c[1]); got != base {
			t.Errorf("%s: fingerprint differs", name)
		}
	}
	different := map[string][2]string{
		"other title":    {`mutation { createTask(input: {projectId: "p1", title: "U", priority: HIGH}) { id } }`, ""},
		"other priority": {`mutation { createTask(input: {projectId: "p1", title: "T", priority: LOW}) { id } }`, ""},
		"extra null":     {`mutation { createTask(input: {projectId: "p1", title: "T", priority: HIGH, description: null}) { id } }`, ""},
		"extra value":    {`mutation { createTask(input: {projectId: "p1", title: "T", priority: HIGH, description: "d"}) { id } }`, ""},
		"other field":    {`mutation { createProject(input: {workspaceId: "p1", name: "T"}) { id } }`, ""},
	}
	for name, c := range different {
		if got := fp(t, c[0], c[1]); got == base {
			t.Errorf("%s: fingerprint is the same", name)
		}
	}
}

func TestFingerprintAbsentIsNotNull(t *testing.T) {
	t.Parallel()
	q := `mutation($in: UpdateTaskInput!) { updateTask(id: "t", input: $in) { id } }`
	absent := fp(t, q, `{"in": {"title": "x"}}`)
	null := fp(t, q, `{"in": {"title": "x", "assigneeId": null}}`)
	if absent == null {
		t.Fatal("an absent field and a null field have the same fingerprint")
	}
	if fp(t, `mutation { updateTask(id: "t", input: {title: "x", assigneeId: null}) { id } }`, "") != null {
		t.Fatal("inline null differs from variable null")
	}
	// A variable that is not provided is an absent field, not a null one.
	if fp(t, `mutation($a: ID) { updateTask(id: "t", input: {title: "x", assigneeId: $a}) { id } }`, "") != absent {
		t.Fatal("an unprovided variable is not the same as an absent field")
	}
}

func TestFingerprintNormalisesTime(t *testing.T) {
	t.Parallel()
	q := `mutation($d: Time) { updateTask(id: "t", input: {dueDate: $d}) { id } }`
	if fp(t, q, `{"d": "2026-01-02T03:04:05Z"}`) != fp(t, q, `{"d": "2026-01-02T04:04:05+01:00"}`) {
		t.Fatal("the same instant in two zones has two fingerprints")
	}
	if fp(t, q, `{"d": "2026-01-02T03:04:05Z"}`) == fp(t, q, `{"d": "2026-01-02T03:04:06Z"}`) {
		t.Fatal("two instants have one fingerprint")
	}
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	long := string(bytes.Repeat([]byte("a"), 255))
	for _, k := range []string{"a", long, "key with spaces ~!"} {
		if validKey(k) != nil {
			t.Errorf("%q refused", k)
		}
	}
	for _, k := range []string{"", long + "a", "tab\there", "é", "nl\n"} {
		if validKey(k) == nil {
			t.Errorf("%q accepted", k)
		}
	}
}

func TestHeaderKeyGrammar(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	for in, want := range map[string]string{
		"5b1c0e0e-3f7a-4c1e-9a53-0d6c2f1d8e2a": "5b1c0e0e-3f7a-4c1e-9a53-0d6c2f1d8e2a", // bare, as always
		"a;x=1":                                "a;x=1",                                // bare keys are literal
		`~!#$%&'()*+-./:;<=>?@[\]^_{|}`:        `~!#$%&'()*+-./:;<=>?@[\]^_{|}`,
		long:                                   long,
		`"abc"`:                                "abc",
		`"a\"b"`:                               `a"b`,
		`"a\\b"`:                               `a\b`,
		`"with spaces"`:                        "with spaces",
		`"abc";x=1`:                            "abc", // parameters are ignored (RFC 9651)
		`"abc";x;y="z"`:                        "abc",
		`"` + long + `"`:                       long,
	} {
		if got, err := headerKey([]string{in}); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		`"a"b"`, `"a\"b`, `"abc"x`, `"a\x"`, `"é"`, `""`, `"abc";`, `"abc";X=1`, `"a", "b"`, `"` + long + `k"`,
		"", "abc def", "k1, k2", "k1,k2", `a"b`, "é", long + "k", "tab\tkey",
	} {
		_, err := headerKey([]string{in})
		if errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("%s: %v, want BAD_USER_INPUT", in, err)
		}
	}
	if _, err := headerKey([]string{"a", "b"}); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("two header lines: %v", err)
	}
}

func TestResultTypesCoverKeyedMutations(t *testing.T) {
	t.Parallel()
	m := New(Options{})
	if err := m.Validate(graph.NewExecutableSchema(graph.Config{})); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range schema.Mutation.Fields {
		if f.Arguments.ForName(keyArg) != nil {
			n++
			if m.results[f.Name] == nil {
				t.Errorf("no result type for %s", f.Name)
			}
		}
	}
	if n == 0 || len(m.results) != n {
		t.Fatalf("%d keyed fields, %d result types", n, len(m.results))
	}
	if m.results["createTask"].String() != "*store.Task" || m.results["deleteTask"].String() != "bool" {
		t.Fatalf("wrong types: %v %v", m.results["createTask"], m.results["deleteTask"])
	}
}
