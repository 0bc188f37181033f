package cost

import (
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// Introspection pricing (docs/api.md#rate-limits-and-query-cost). The work of
// an introspection field is the fields it resolves, and with aliases its
// selection can resolve the whole schema many times over: priced at a fixed
// 10, `{ __schema { types { f1: fields { ... } ... f128: fields { ... } } } }`
// resolved 10 MB of fields in a second of CPU. So __schema and __type cost
// 10 for up to IntrospectionFields fields resolved (GraphiQL's introspection
// query of TaskFlow's schema resolves about 6,200, so the
// playground always loads for 10), and one point more for every
// IntrospectionFieldsPerPoint fields past it.
const (
	// IntrospectionFields is how many fields an introspection operation
	// resolves for its IntrospectionCost.
	IntrospectionFields = 20_000
	// IntrospectionFieldsPerPoint is what a point pays for past them.
	IntrospectionFieldsPerPoint = 100
	// introspectionSteps bounds the work of counting: a document that needs
	// more resolves at least as many fields (each step is a field the
	// executor would resolve), far more than any budget pays for.
	introspectionSteps = 1_000_000
)

// introspection counts the fields the introspection fields of one operation
// resolve against a schema. It follows gqlgen's introspection resolvers
// (graphql/introspection): every field selected on every object counts 1,
// aliases and fragments each time they are selected (as Operation counts
// them), deprecated fields, values and arguments included whatever
// includeDeprecated says (an upper bound). The count of a selection set on
// one type is memoised, so counting takes at most the fields the executor
// resolves, usually far fewer.
type introspection struct {
	s     *ast.Schema
	vars  map[string]any
	memo  map[typeKey]int64
	steps int
}

type typeKey struct {
	set *ast.Selection // the selection set, by its first element
	typ string         // the type, as written (wrappers included)
}

// over reports whether the count took too many steps; it then saturates.
func (in *introspection) over() bool { return in.steps > introspectionSteps }

// fields calls f for every field of set, through fragments, and returns the
// saturated sum of 1 + f(field) over them.
func (in *introspection) fields(set ast.SelectionSet, f func(*ast.Field) int64) int64 {
	var total int64
	for _, sel := range set {
		if in.over() {
			return saturated
		}
		switch s := sel.(type) {
		case *ast.Field:
			in.steps++
			total = Add(total, Add(1, f(s)))
		case *ast.InlineFragment:
			total = Add(total, in.fields(s.SelectionSet, f))
		case *ast.FragmentSpread:
			if s.Definition != nil {
				total = Add(total, in.fields(s.Definition.SelectionSet, f))
			}
		}
	}
	return total
}

// root counts __schema or __type, f, with what it selects.
func (in *introspection) root(f *ast.Field) int64 {
	switch f.Name {
	case "__schema":
		return Add(1, in.schema(f.SelectionSet))
	case "__type":
		if a := f.Arguments.ForName("name"); a != nil && a.Value != nil {
			if v, err := a.Value.Value(in.vars); err == nil {
				if name, ok := v.(string); ok && in.s.Types[name] != nil {
					return Add(1, in.typ(f.SelectionSet, ast.NamedType(name, nil)))
				}
			}
		}
		return 1
	}
	return 0
}

func (in *introspection) schema(set ast.SelectionSet) int64 {
	return in.fields(set, func(f *ast.Field) int64 {
		switch f.Name {
		case "types":
			var n int64
			for name := range in.s.Types {
				n = Add(n, in.typ(f.SelectionSet, ast.NamedType(name, nil)))
			}
			return n
		case "queryType", "mutationType", "subscriptionType":
			var d *ast.Definition
			switch f.Name {
			case "queryType":
				d = in.s.Query
			case "mutationType":
				d = in.s.Mutation
			default:
				d = in.s.Subscription
			}
			if d == nil {
				return 0
			}
			return in.typ(f.SelectionSet, ast.NamedType(d.Name, nil))
		case "directives":
			var n int64
			for _, d := range in.s.Directives {
				n = Add(n, in.fields(f.SelectionSet, func(g *ast.Field) int64 {
					if g.Name == "args" {
						return in.arguments(g.SelectionSet, d.Arguments)
					}
					return 0
				}))
			}
			return n
		}
		return 0
	})
}

// typ counts set selected on the __Type of t (a named type, or a list or
// non-null wrapper of one).
func (in *introspection) typ(set ast.SelectionSet, t *ast.Type) int64 {
	if len(set) == 0 || t == nil {
		return 0
	}
	key := typeKey{set: &set[0], typ: t.String()}
	if n, ok := in.memo[key]; ok {
		return n
	}
	var def *ast.Definition
	if t.NamedType != "" && !t.NonNull {
		def = in.s.Types[t.NamedType]
	}
	n := in.fields(set, func(f *ast.Field) int64 {
		switch f.Name {
		case "ofType":
			switch {
			case t.NonNull:
				inner := *t
				inner.NonNull = false
				return in.typ(f.SelectionSet, &inner)
			case t.Elem != nil:
				return in.typ(f.SelectionSet, t.Elem)
			}
			return 0
		}
		if def == nil {
			return 0
		}
		var n int64
		switch f.Name {
		case "fields":
			if def.Kind != ast.Object && def.Kind != ast.Interface {
				return 0
			}
			for _, fd := range def.Fields {
				if strings.HasPrefix(fd.Name, "__") {
					continue
				}
				n = Add(n, in.fields(f.SelectionSet, func(g *ast.Field) int64 {
					switch g.Name {
					case "args":
						return in.arguments(g.SelectionSet, fd.Arguments)
					case "type":
						return in.typ(g.SelectionSet, fd.Type)
					}
					return 0
				}))
			}
		case "inputFields":
			if def.Kind == ast.InputObject {
				for _, fd := range def.Fields {
					n = Add(n, in.inputValue(f.SelectionSet, fd.Type))
				}
			}
		case "enumValues":
			if def.Kind == ast.Enum {
				for range def.EnumValues {
					n = Add(n, in.fields(f.SelectionSet, func(*ast.Field) int64 { return 0 }))
				}
			}
		case "interfaces":
			if def.Kind == ast.Object || def.Kind == ast.Interface {
				for _, name := range def.Interfaces {
					n = Add(n, in.typ(f.SelectionSet, ast.NamedType(name, nil)))
				}
			}
		case "possibleTypes":
			if def.Kind == ast.Interface || def.Kind == ast.Union {
				for _, p := range in.s.GetPossibleTypes(def) {
					n = Add(n, in.typ(f.SelectionSet, ast.NamedType(p.Name, nil)))
				}
			}
		}
		return n
	})
	in.memo[key] = n
	return n
}

// arguments counts set selected on the __InputValue of each of args (the
// arguments of a field or directive, or the fields of an input object).
func (in *introspection) arguments(set ast.SelectionSet, args ast.ArgumentDefinitionList) int64 {
	var n int64
	for _, a := range args {
		n = Add(n, in.inputValue(set, a.Type))
	}
	return n
}

// inputValue counts set selected on one __InputValue of type t.
func (in *introspection) inputValue(set ast.SelectionSet, t *ast.Type) int64 {
	return in.fields(set, func(g *ast.Field) int64 {
		if g.Name == "type" {
			return in.typ(g.SelectionSet, t)
		}
		return 0
	})
}
