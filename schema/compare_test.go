package schema

import (
	"os"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

const base = `
directive @cost(weight: Int!) on FIELD_DEFINITION
scalar Time
enum Status { TODO DONE }
interface Node { id: ID! }
type Query {
  task(id: ID!): Task
  tasks(status: Status, first: Int = 20): [Task!]!
  node(id: ID!): Node
  search(q: String!): [Hit!]!
}
type Mutation { createTask(input: CreateTaskInput!, key: String): Task! }
type Task implements Node { id: ID!, title: String!, note: String, status: Status!, due: Time }
type Comment implements Node { id: ID!, body: String! }
union Hit = Task | Comment
input CreateTaskInput { title: String!, note: String, status: Status = TODO }
`

func mustLoad(t *testing.T, sdl string) *ast.Schema {
	t.Helper()
	s, err := gqlparser.LoadSchema(&ast.Source{Name: "test.graphqls", Input: sdl})
	if err != nil {
		t.Fatalf("%v\n%s", err, sdl)
	}
	return s
}

// TestCompare checks the checker on small edits of a schema: each breaking
// edit is reported as breaking at its path, each compatible one as a
// non-breaking change only.
func TestCompare(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		old, new string // replace old by new in base
		breaking string // path of the expected breaking change; "" for none
		change   string // path of the expected non-breaking change, if breaking is ""
	}{
		{"remove type", "type Comment implements Node { id: ID!, body: String! }\nunion Hit = Task | Comment", "union Hit = Task", "Comment", ""},
		{"remove field", "note: String, status", "status", "Task.note", ""},
		{"remove enum value", "enum Status { TODO DONE }", "enum Status { TODO }", "Status.DONE", ""},
		{"remove argument", "tasks(status: Status, first: Int = 20)", "tasks(first: Int = 20)", "Query.tasks(status)", ""},
		{"output non-null to nullable", "title: String!, note", "title: String, note", "Task.title", ""},
		{"output type changed", "due: Time }", "due: String }", "Task.due", ""},
		{"output list to single", "tasks(status: Status, first: Int = 20): [Task!]!", "tasks(status: Status, first: Int = 20): Task!", "Query.tasks", ""},
		{"output list item nullable", "): [Task!]!", "): [Task]!", "Query.tasks", ""},
		{"argument nullable to non-null", "createTask(input: CreateTaskInput!, key: String)", "createTask(input: CreateTaskInput!, key: String!)", "Mutation.createTask(key)", ""},
		{"argument type changed", "task(id: ID!)", "task(id: String!)", "Query.task(id)", ""},
		{"input field nullable to non-null", "input CreateTaskInput { title: String!, note: String,", "input CreateTaskInput { title: String!, note: String!,", "CreateTaskInput.note", ""},
		{"new required argument", "task(id: ID!)", "task(id: ID!, workspace: ID!)", "Query.task(workspace)", ""},
		{"new required input field", "status: Status = TODO }", "status: Status = TODO, projectId: ID! }", "CreateTaskInput.projectId", ""},
		{"default changed", "first: Int = 20", "first: Int = 50", "Query.tasks(first)", ""},
		{"default removed", "status: Status = TODO }", "status: Status }", "CreateTaskInput.status", ""},
		{"kind changed", "scalar Time", "enum Time { NOW }", "Time", ""},
		{"union member removed", "union Hit = Task | Comment", "union Hit = Task", "Hit", ""},
		{"interface dropped", "type Comment implements Node {", "type Comment {", "Comment", ""},
		{"input field removed", "input CreateTaskInput { title: String!, note: String,", "input CreateTaskInput { title: String!,", "CreateTaskInput.note", ""},
		{"directive removed", "directive @cost(weight: Int!) on FIELD_DEFINITION", "", "@cost", ""},
		{"directive location removed", "on FIELD_DEFINITION", "on OBJECT", "@cost", ""},

		{"add type", "scalar Time", "scalar Time\ntype Label { name: String! }", "", "Label"},
		{"add field", "due: Time }", "due: Time, priority: Int }", "", "Task.priority"},
		{"add enum value", "enum Status { TODO DONE }", "enum Status { TODO DONE BLOCKED }", "", "Status.BLOCKED"},
		{"add optional argument", "task(id: ID!)", "task(id: ID!, includeDeleted: Boolean)", "", "Query.task(includeDeleted)"},
		{"add argument with default", "task(id: ID!)", "task(id: ID!, version: Int! = 1)", "", "Query.task(version)"},
		{"add optional input field", "status: Status = TODO }", "status: Status = TODO, due: Time }", "", "CreateTaskInput.due"},
		{"output nullable to non-null", "note: String,", "note: String!,", "", "Task.note"},
		{"argument non-null to nullable", "task(id: ID!)", "task(id: ID)", "", "Query.task(id)"},
		{"add default", "key: String)", "key: String = \"k\")", "", "Mutation.createTask(key)"},
		{"deprecate field", "note: String,", "note: String @deprecated(reason: \"use description\"),", "", "Task.note"},
		{"add union member", "union Hit = Task | Comment", "union Hit = Task | Comment | Project\ntype Project { id: ID! }", "", "Hit"},
		{"add description", "type Task implements", "\"A task.\"\ntype Task implements", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(base, c.old) {
				t.Fatalf("base schema has no %q", c.old)
			}
			cs := Compare(mustLoad(t, base), mustLoad(t, strings.Replace(base, c.old, c.new, 1)))
			b := Breaking(cs)
			if c.breaking == "" {
				if len(b) > 0 {
					t.Fatalf("compatible change reported as breaking:\n%s", list(b))
				}
				if c.change == "" && len(cs) > 0 {
					t.Fatalf("want no change, got:\n%s", list(cs))
				}
				if c.change != "" && !hasPath(cs, c.change) {
					t.Fatalf("want a non-breaking change at %s, got:\n%s", c.change, list(cs))
				}
				return
			}
			if !hasPath(b, c.breaking) {
				t.Fatalf("want a breaking change at %s, got:\n%s", c.breaking, list(cs))
			}
		})
	}
}

func hasPath(cs []Change, path string) bool {
	for _, c := range cs {
		if c.Path == path {
			return true
		}
	}
	return false
}

// TestCompareSame checks that a schema has no change against itself.
func TestCompareSame(t *testing.T) {
	t.Parallel()
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if cs := Compare(s, s); len(cs) > 0 {
		t.Fatalf("schema differs from itself:\n%s", list(cs))
	}
}

// TestPublishedContractCatchesBreaks edits the real schema the way a careless
// change would and checks that the committed artifact catches it.
func TestPublishedContractCatchesBreaks(t *testing.T) {
	t.Parallel()
	srcs, err := Sources()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(artifact)
	if err != nil {
		t.Fatal(err)
	}
	published, err := FromIntrospection(committed)
	if err != nil {
		t.Fatal(err)
	}
	edits := []struct{ file, old, new, path string }{
		{"schema/task.graphqls", "  title: String!\n  description: String\n  status: TaskStatus!", "  description: String\n  status: TaskStatus!", "Task.title"},
		{"schema/schema.graphqls", "idempotencyKey: String): Task!\n  updateTask", "idempotencyKey: String!): Task!\n  updateTask", "Mutation.createTask(idempotencyKey)"},
		{"schema/workspace.graphqls", "  VIEWER\n", "", "Role.VIEWER"},
	}
	for _, e := range edits {
		var edited []*ast.Source
		found := false
		for _, s := range srcs {
			c := *s
			if c.Name == e.file && strings.Contains(c.Input, e.old) {
				c.Input = strings.Replace(c.Input, e.old, e.new, 1)
				found = true
			}
			edited = append(edited, &c)
		}
		if !found {
			t.Fatalf("%s has no %q", e.file, e.old)
		}
		s, gerr := gqlparser.LoadSchema(edited...)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if b := Breaking(Compare(published, s)); !hasPath(b, e.path) {
			t.Errorf("editing %s: want a breaking change at %s, got:\n%s", e.file, e.path, list(b))
		}
	}
}
