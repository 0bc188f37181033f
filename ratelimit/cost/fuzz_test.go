package cost_test

import (
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"

	"taskflow/ratelimit/cost"
)

// inline replaces every fragment spread by an inline fragment of its
// definition, giving up (false) past budget nodes: the naive expansion the
// memoised walk must agree with.
func inline(set ast.SelectionSet, budget *int) (ast.SelectionSet, bool) {
	out := make(ast.SelectionSet, 0, len(set))
	for _, sel := range set {
		*budget--
		if *budget < 0 {
			return nil, false
		}
		switch s := sel.(type) {
		case *ast.Field:
			c := *s
			var ok bool
			if c.SelectionSet, ok = inline(s.SelectionSet, budget); !ok {
				return nil, false
			}
			out = append(out, &c)
		case *ast.InlineFragment:
			c := *s
			var ok bool
			if c.SelectionSet, ok = inline(s.SelectionSet, budget); !ok {
				return nil, false
			}
			out = append(out, &c)
		case *ast.FragmentSpread:
			if s.Definition == nil {
				continue
			}
			inner, ok := inline(s.Definition.SelectionSet, budget)
			if !ok {
				return nil, false
			}
			out = append(out, &ast.InlineFragment{TypeCondition: s.Definition.TypeCondition, SelectionSet: inner})
		}
	}
	return out, true
}

// FuzzCost checks the cost walk on any valid document: it never panics, is
// never negative, is deterministic, and the memoised walk agrees with the
// naive expansion of every fragment.
func FuzzCost(f *testing.F) {
	f.Add(`{ me { id workspaces { members { user { id } } } } }`, int64(0))
	f.Add(`query($n: Int) { searchTasks(workspaceId: "w", query: "q", first: $n) { edges { node { id comments { nodes { author { id } } } } } pageInfo { endCursor } } }`, int64(7))
	f.Add(`mutation { a: login(email: "e", password: "p") { token user { id } } b: logout }`, int64(0))
	f.Add(`{ ...F ...F } fragment F on Query { me { ...U } } fragment U on User { workspaces { id } }`, int64(0))
	f.Add(`{ __schema { types { name } } a: __type(name: "Task") { name } }`, int64(0))
	f.Add(doubling(8), int64(0))
	f.Fuzz(func(t *testing.T, query string, n int64) {
		doc, errs := gqlparser.LoadQuery(schema, query)
		if errs != nil {
			return
		}
		for _, op := range doc.Operations {
			vars := map[string]any{}
			if op.VariableDefinitions.ForName("n") != nil {
				vars["n"] = n
			}
			coerced, err := validator.VariableValues(schema, op, vars)
			if err != nil {
				continue
			}
			c := cost.Operation(schema, op, coerced)
			if c < 0 {
				t.Fatalf("negative cost %d", c)
			}
			if again := cost.Operation(schema, op, coerced); again != c {
				t.Fatalf("cost not deterministic: %d then %d", c, again)
			}
			budget := 20000
			set, ok := inline(op.SelectionSet, &budget)
			if !ok {
				continue
			}
			naive := *op
			naive.SelectionSet = set
			if got := cost.Operation(schema, &naive, coerced); got != c {
				t.Fatalf("memoised cost %d, naive expansion %d", c, got)
			}
		}
	})
}
