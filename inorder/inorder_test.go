package inorder_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/graph"
	"taskflow/inorder"
)

// schema loads the repository's schema, which graph.ListOrder was generated
// from.
func schema(t *testing.T) *ast.Schema {
	t.Helper()
	files, err := filepath.Glob("../schema/*.graphqls")
	if err != nil || len(files) == 0 {
		t.Fatalf("schema files: %v", err)
	}
	var sources []*ast.Source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, &ast.Source{Name: f, Input: string(b)})
	}
	s, err := gqlparser.LoadSchema(sources...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listSelection returns the selection of the elements of the list at path
// (field names from the operation's root) in query.
func listSelection(t *testing.T, s *ast.Schema, query string, path ...string) ast.SelectionSet {
	t.Helper()
	doc, errList := gqlparser.LoadQuery(s, query)
	if errList != nil {
		t.Fatalf("%s: %v", query, errList)
	}
	sel := doc.Operations[0].SelectionSet
	for _, name := range path {
		var next ast.SelectionSet
		for _, f := range graphql.CollectFields(&graphql.OperationContext{Doc: doc}, sel, nil) {
			if f.Alias == name {
				next = f.Selections
			}
		}
		if next == nil {
			t.Fatalf("%s: no field %s", query, name)
		}
		sel = next
	}
	return sel
}

// The generated table answers as the schema says: a list whose selection
// reaches a resolver anywhere below keeps gqlgen's goroutines (so its
// loaders batch across the elements), one of plain fields does not.
func TestInOrderOfTheSchema(t *testing.T) {
	t.Parallel()
	s := schema(t)
	const page = `query($id: ID!) { project(id: $id) { tasks(first: 20) { %s } } } %s`
	for _, c := range []struct {
		name, selection, fragments string
		path                       []string
		typ                        string
		want                       bool
	}{
		{"plain fields", `nodes { id title status priority dueDate createdAt }`, "", []string{"project", "tasks", "nodes"}, "Task", true},
		{"__typename", `nodes { __typename id }`, "", []string{"project", "tasks", "nodes"}, "Task", true},
		{"a resolver", `nodes { id assignee { id } }`, "", []string{"project", "tasks", "nodes"}, "Task", false},
		{"a resolver in a fragment", `nodes { id ...A }`, `fragment A on Task { comments { nodes { id } } }`, []string{"project", "tasks", "nodes"}, "Task", false},
		{"plain fields in fragments", `nodes { ... on Task { id } ...A }`, `fragment A on Task { title }`, []string{"project", "tasks", "nodes"}, "Task", true},
		{"edges to plain nodes", `edges { cursor node { id title } }`, "", []string{"project", "tasks", "edges"}, "TaskEdge", true},
		{"edges to a resolver", `edges { cursor node { id project { id } } }`, "", []string{"project", "tasks", "edges"}, "TaskEdge", false},
		{"a type the table lacks", `nodes { id }`, "", []string{"project", "tasks", "nodes"}, "NoSuchType", false},
	} {
		sel := listSelection(t, s, fmt.Sprintf(page, c.selection, c.fragments), c.path...)
		if got := graph.ListOrder.InOrder(c.typ, sel); got != c.want {
			t.Errorf("%s: InOrder(%s, %s) = %t, want %t", c.name, c.typ, c.selection, got, c.want)
		}
	}
	// Every object type of the schema is in the table, with every field.
	for name, def := range s.Types {
		if def.Kind != ast.Object {
			continue
		}
		fields, ok := graph.ListOrder[name]
		if !ok {
			t.Errorf("ListOrder lacks the object type %s", name)
			continue
		}
		for _, f := range def.Fields {
			if _, ok := fields[f.Name]; !ok && !strings.HasPrefix(f.Name, "__") {
				t.Errorf("ListOrder lacks %s.%s", name, f.Name)
			}
		}
	}
}

// The walk stops at a @defer and at a selection deeper than it follows.
func TestInOrderRefusesWhatItDoesNotFollow(t *testing.T) {
	t.Parallel()
	s := inorder.Schema{
		"T": {"id": {}, "t": {Type: "T"}},
	}
	leaf := ast.SelectionSet{&ast.Field{Name: "id"}}
	if !s.InOrder("T", leaf) {
		t.Fatal("a plain field: not in order")
	}
	deferred := ast.SelectionSet{&ast.InlineFragment{SelectionSet: leaf, Directives: ast.DirectiveList{{Name: "defer"}}}}
	if s.InOrder("T", deferred) {
		t.Error("a @defer: in order")
	}
	if s.InOrder("T", ast.SelectionSet{&ast.FragmentSpread{Name: "F"}}) {
		t.Error("a spread of an unknown fragment: in order")
	}
	if s.InOrder("T", ast.SelectionSet{&ast.Field{Name: "nope"}}) {
		t.Error("an unknown field: in order")
	}
	deep := leaf
	for range 40 {
		deep = ast.SelectionSet{&ast.Field{Name: "t", SelectionSet: deep}}
	}
	if s.InOrder("T", deep) {
		t.Error("40 levels: in order")
	}
	// Fragments that spread the next one twice, 60 deep: 2^60 spreads,
	// walked once each (and refused for their depth).
	frags := make([]*ast.FragmentDefinition, 61)
	frags[60] = &ast.FragmentDefinition{Name: "F60", SelectionSet: leaf}
	for i := 59; i >= 0; i-- {
		next := frags[i+1]
		frags[i] = &ast.FragmentDefinition{Name: fmt.Sprintf("F%d", i), SelectionSet: ast.SelectionSet{
			&ast.FragmentSpread{Name: next.Name, Definition: next}, &ast.FragmentSpread{Name: next.Name, Definition: next}}}
	}
	if s.InOrder("T", ast.SelectionSet{&ast.FragmentSpread{Name: "F0", Definition: frags[0]}}) {
		t.Error("fragments 60 deep: in order")
	}
	// 30 deep, within maxDepth: 2^30 spreads of plain fields, in order.
	twice := ast.SelectionSet{&ast.FragmentSpread{Name: "F30", Definition: frags[30]}}
	if !s.InOrder("T", twice) {
		t.Error("fragments 30 deep, each spread twice: not in order")
	}
	shallow := leaf
	for range 10 {
		shallow = ast.SelectionSet{&ast.Field{Name: "t", SelectionSet: shallow}}
	}
	if !s.InOrder("T", shallow) {
		t.Error("10 levels of plain fields: not in order")
	}
}

// plain is a schema of one type T with a plain field and a concurrent one;
// plainSel selects the plain one.
var (
	plain    = inorder.Schema{"T": {"id": {}, "r": {Concurrent: true}}}
	plainSel = ast.SelectionSet{&ast.Field{Name: "id"}}
)

// responseContext is a context in which errors can be added, as the
// executor's is.
func responseContext() context.Context {
	ctx := graphql.WithResponseContext(context.Background(), graphql.DefaultErrorPresenter, func(_ context.Context, r any) error {
		return fmt.Errorf("recovered: %v", r)
	})
	return graphql.WithFieldContext(ctx, &graphql.FieldContext{Field: graphql.CollectedField{Field: &ast.Field{Alias: "list"}}})
}

// In order, MarshalSlice marshals the elements one after another in the
// caller's goroutine, each with its index; a panic is the element's null
// and an error, as with gqlgen's goroutines.
func TestMarshalSliceInOrder(t *testing.T) {
	t.Parallel()
	ctx := responseContext()
	var running, overlapped atomic.Int32
	var order []int
	var kept []context.Context // the elements' contexts, which outlive their marshaling
	caller := goroutineID()
	ret := inorder.MarshalSlice(ctx, plain, "T", plainSel, 4, func(ctx context.Context, i int) graphql.Marshaler {
		if running.Add(1) > 1 {
			overlapped.Add(1)
		}
		defer running.Add(-1)
		if goroutineID() != caller {
			t.Errorf("element %d marshaled in another goroutine", i)
		}
		if fc := graphql.GetFieldContext(ctx); fc.Index == nil || *fc.Index != i {
			t.Errorf("element %d: field context index %v", i, fc.Index)
		}
		order = append(order, i)
		kept = append(kept, ctx)
		if i == 2 {
			panic("element 2")
		}
		return graphql.MarshalInt(i)
	})
	if overlapped.Load() != 0 || fmt.Sprint(order) != "[0 1 2 3]" {
		t.Fatalf("order %v, %d overlaps", order, overlapped.Load())
	}
	if len(ret) != 4 || ret[2] != graphql.Null || ret[3] == graphql.Null {
		t.Fatalf("results %v", ret)
	}
	for i, c := range kept {
		if fc := graphql.GetFieldContext(c); fc.Index == nil || *fc.Index != i || fc.Path().String() != fmt.Sprintf("list[%d]", i) {
			t.Errorf("after the list, element %d's field context has index %v, path %s", i, fc.Index, fc.Path())
		}
	}
	errList := graphql.GetErrors(ctx)
	if len(errList) != 1 || !strings.Contains(errList[0].Message, "element 2") || fmt.Sprint(errList[0].Path) != "list[2]" {
		t.Fatalf("errors %v", errList)
	}
	var ge *gqlerror.Error
	if !errors.As(errList[0], &ge) {
		t.Fatal("not a gqlerror")
	}
}

// Not in order, MarshalSlice is gqlgen's: the elements run in goroutines of
// their own, together (each waits for all of them to have started).
func TestMarshalSliceConcurrently(t *testing.T) {
	t.Parallel()
	const n = 4
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	ret := inorder.MarshalSlice(responseContext(), plain, "T", ast.SelectionSet{&ast.Field{Name: "r"}}, n, func(ctx context.Context, i int) graphql.Marshaler {
		started.Done()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			t.Errorf("element %d: the others did not start while it ran", i)
		}
		return graphql.MarshalInt(i)
	})
	if len(ret) != n {
		t.Fatalf("results %v", ret)
	}
}

// goroutineID is the calling goroutine's id, from its stack's header.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// settler is an inorder.Settler settling the fields it holds, as
// "Type.field".
type settler map[string]bool

func (s settler) Settled(typ, field string) bool { return s[typ+"."+field] }

// A concurrent field that the list's page settles does not stop the walk,
// which still goes through its selection; any other concurrent field does.
func TestInOrderSettled(t *testing.T) {
	t.Parallel()
	s := schema(t)
	page := settler{"Task.assignee": true, "Task.comments": true, "Comment.author": true}
	const query = `query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { %s } } } }`
	for _, c := range []struct {
		selection string
		settled   inorder.Settler
		want      bool
	}{
		{`id assignee { id name } comments { nodes { body author { name } } }`, page, true},
		{`id assignee { id name }`, nil, false},
		{`id assignee { id name }`, settler{}, false},
		{`id createdBy { id }`, page, false},
		{`assignee { workspaces { id } }`, page, false},
		{`comments { nodes { task { id } } }`, page, false},
		{`comments { nodes { author { id } } }`, settler{"Task.comments": true}, false},
	} {
		sel := listSelection(t, s, fmt.Sprintf(query, c.selection), "project", "tasks", "nodes")
		if got := graph.ListOrder.InOrderSettled("Task", sel, c.settled); got != c.want {
			t.Errorf("InOrderSettled(Task, %s, %v) = %t, want %t", c.selection, c.settled, got, c.want)
		}
	}
}

// Under a list of a page that settles its concurrent field, MarshalSlice
// marshals in order, and ResolveConcurrently resolves the field at once in
// the same goroutine, counting a null of a non-null field (and a panic's)
// against the field set's Invalids as Dispatch would. Elsewhere
// ResolveConcurrently only schedules the field for Dispatch.
func TestResolveConcurrentlyUnderASettledList(t *testing.T) {
	t.Parallel()
	ctx := graphql.WithFieldContext(responseContext(), &graphql.FieldContext{Result: settler{"T.r": true}})
	ctx = graphql.WithFieldContext(ctx, &graphql.FieldContext{Field: graphql.CollectedField{Field: &ast.Field{Alias: "nodes"}}})
	oc := &graphql.OperationContext{RecoverFunc: func(_ context.Context, r any) error { return fmt.Errorf("recovered: %v", r) }}
	sel := ast.SelectionSet{&ast.Field{Name: "id"}, &ast.Field{Name: "r"}}
	caller := goroutineID()
	values := map[int][]graphql.Marshaler{}
	invalids := map[int]uint32{}
	inorder.MarshalSlice(ctx, plain, "T", sel, 3, func(ctx context.Context, i int) graphql.Marshaler {
		fields := []graphql.CollectedField{{Field: &ast.Field{Alias: "a"}}, {Field: &ast.Field{Alias: "b"}}}
		out := graphql.NewFieldSet(fields)
		deferred := graphql.NewDeferredGroup(ctx)
		for j := range fields {
			inorder.ResolveConcurrently(ctx, out, oc, &deferred, j, true, true, func(ctx context.Context) graphql.Marshaler {
				if goroutineID() != caller {
					t.Errorf("element %d, field %d resolved in another goroutine", i, j)
				}
				switch {
				case i == 1 && j == 0:
					return graphql.Null
				case i == 2 && j == 1:
					panic("field b of 2")
				}
				return graphql.MarshalInt(i*10 + j)
			})
			if out.Values[j] == nil {
				t.Errorf("element %d, field %d not resolved at once", i, j)
			}
		}
		out.Dispatch(ctx)
		values[i], invalids[i] = out.Values, out.Invalids
		return out
	})
	if fmt.Sprint(invalids) != "map[0:0 1:1 2:1]" || values[0][1] == graphql.Null || values[2][1] != graphql.Null {
		t.Errorf("invalids %v, values %v", invalids, values)
	}
	if errList := graphql.GetErrors(ctx); len(errList) != 1 || !strings.Contains(errList[0].Message, "field b of 2") {
		t.Errorf("errors %v", errList)
	}

	// Not under such a list: scheduled, resolved by Dispatch (the second of
	// two fields in a goroutine of its own).
	out := graphql.NewFieldSet([]graphql.CollectedField{{Field: &ast.Field{Alias: "a"}}, {Field: &ast.Field{Alias: "b"}}})
	deferred := graphql.NewDeferredGroup(ctx)
	var elsewhere atomic.Int32
	for j := range 2 {
		inorder.ResolveConcurrently(ctx, out, oc, &deferred, j, true, true, func(context.Context) graphql.Marshaler {
			if goroutineID() != caller {
				elsewhere.Add(1)
			}
			return graphql.MarshalInt(j)
		})
	}
	if out.Values[0] != nil || out.Values[1] != nil {
		t.Fatal("resolved before Dispatch")
	}
	out.Dispatch(ctx)
	if elsewhere.Load() != 1 || out.Values[1] == nil {
		t.Errorf("%d fields resolved in other goroutines, values %v", elsewhere.Load(), out.Values)
	}
}

// An object with a deferred field gets gqlgen's group (its path, a field set
// and a map for the labels); any other an empty one.
func TestNewDeferredGroupOnlyForDeferredFields(t *testing.T) {
	t.Parallel()
	ctx := graphql.WithFieldContext(responseContext(), &graphql.FieldContext{Index: new(int)})
	plainField := graphql.CollectedField{Field: &ast.Field{Alias: "a"}}
	deferredField := graphql.CollectedField{Field: &ast.Field{Alias: "b"}, Deferrables: []*graphql.Deferrable{{Label: "x"}}}
	if g := inorder.NewDeferredGroup(ctx, []graphql.CollectedField{plainField}); g.FieldSet != nil || g.Defers != nil || g.Path != nil {
		t.Errorf("no deferred field: group %+v", g)
	}
	g := inorder.NewDeferredGroup(ctx, []graphql.CollectedField{plainField, deferredField})
	if g.FieldSet == nil || g.Defers == nil || fmt.Sprint(g.Path) != "list[0]" {
		t.Errorf("a deferred field: group %+v", g)
	}
}
