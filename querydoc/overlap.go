package querydoc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator/core"
)

// overlapRuleName is the name of the spec's rule "Field Selection Merging",
// which the rule below replaces under the name of gqlparser's.
const overlapRuleName = "OverlappingFieldsCanBeMerged"

// maxConflicts bounds the conflicts the rule reports for one document.
const maxConflicts = 20

// overlapRule is the spec's rule "Field Selection Merging"
// (FieldsInSetCanMerge) in time linear in the size of the document with its
// fragments expanded, where gqlparser's (graphql-js's algorithm) compares
// every pair of fields of one response name: 14,000 __typename took 7.8 s.
//
// It follows the two conditions of the spec separately, as Simon Adameit's
// algorithm does (sangria, graphql-java), grouping instead of pairing:
//
//   - SameResponseShape holds for every pair of a response name's fields iff
//     every field's type has the same shape (list and non-null wrappers, and
//     the leaf type, or "composite"): one comparison per field against the
//     first. The sub-selections of all the fields are merged and the same
//     is checked on each response name of the merged set, recursively.
//   - For the pairs whose parent types are equal or not both objects, the
//     field names and arguments must be identical and their merged
//     sub-selections must merge. The fields are partitioned by parent
//     object type; the fields on an interface or union (or unknown, like
//     gqlparser) belong to every part. Within a part, identity is a
//     comparison with the first field, and the whole part's sub-selections
//     are merged and checked the same way, recursively: a set that can
//     merge as a whole can merge pairwise, and each pair's condition only
//     involves fields that some pair brings together.
//
// A field whose parent type is unknown takes part in nothing, as in
// gqlparser. Fields on interfaces or unions are visited once per object type
// beside them, so the work is bounded by budget, which Validator sets from
// the selection limit; a document over it is refused. A document with a
// fragment cycle is left to NoFragmentCycles (shape.Cycle; a nil shape is
// measured).
//
// The errors are the spec's, one per conflicting field (at most
// maxConflicts), worded like gqlparser's (which reports every conflicting
// pair, nested ones under their enclosing pair); Validator shows gqlparser's
// own errors for small documents.
func overlapRule(shape *Shape, budget int) core.Rule {
	return core.Rule{Name: overlapRuleName, RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		var o *overlap
		cycle := false
		init := func(w *core.Walker) {
			if o == nil {
				o = newOverlap(w.Schema, w.Document, budget)
				if shape == nil {
					cycle = Measure(w.Document, 1).Cycle
				} else {
					cycle = shape.Cycle
				}
			}
		}
		report := func() {
			for _, c := range o.conflicts[o.reported:] {
				if c.field == nil { // the budget, spent: no place to point at
					addError(core.Message("%s", c.message))
				} else {
					addError(core.Message("%s", c.message), core.At(c.field.Position))
				}
			}
			o.reported = len(o.conflicts)
		}
		observers.OnOperation(func(w *core.Walker, op *ast.OperationDefinition) {
			if init(w); cycle {
				return
			}
			o.checkSet(op.SelectionSet)
			report()
		})
		observers.OnFragment(func(w *core.Walker, f *ast.FragmentDefinition) {
			if init(w); cycle {
				return
			}
			if !o.reached[f.Name] && o.fragments[f.Name] == f {
				// No operation spreads it: check it on its own.
				o.checkSet(f.SelectionSet)
				report()
			}
		})
	}}
}

// overlap is the state of the rule over one document.
type overlap struct {
	schema    *ast.Schema
	fragments map[string]*ast.FragmentDefinition // by name, the first of duplicates
	expanding map[string]bool                    // fragments being expanded (guards a cycle)
	reached   map[string]bool                    // fragments expanded by some check
	budget    int                                // fields left to collect
	conflicts []conflict
	reported  int
	seen      map[conflictKey]bool
	exhausted bool
}

type conflict struct {
	field   *ast.Field
	message string
}

type conflictKey struct {
	field *ast.Field
	kind  uint8
}

func newOverlap(schema *ast.Schema, doc *ast.QueryDocument, budget int) *overlap {
	o := &overlap{
		schema:    schema,
		fragments: make(map[string]*ast.FragmentDefinition, len(doc.Fragments)),
		expanding: map[string]bool{},
		reached:   make(map[string]bool, len(doc.Fragments)),
		budget:    budget,
		seen:      map[conflictKey]bool{},
	}
	for _, f := range doc.Fragments {
		if _, dup := o.fragments[f.Name]; !dup {
			o.fragments[f.Name] = f
		}
	}
	return o
}

// responseGroups is a merged selection set: its fields by response name, the
// names in the order first seen.
type responseGroups struct {
	names  []string
	fields map[string][]*ast.Field
}

func (g *responseGroups) each(f func([]*ast.Field)) {
	for _, name := range g.names {
		f(g.fields[name])
	}
}

// collect adds the fields of set to g, through inline fragments and
// fragment spreads.
func (o *overlap) collect(g *responseGroups, set ast.SelectionSet) {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			o.budget--
			if g.fields == nil {
				g.fields = map[string][]*ast.Field{}
			}
			fields, ok := g.fields[s.Alias]
			if !ok {
				g.names = append(g.names, s.Alias)
			}
			g.fields[s.Alias] = append(fields, s)
		case *ast.InlineFragment:
			o.collect(g, s.SelectionSet)
		case *ast.FragmentSpread:
			f := o.fragments[s.Name]
			if f == nil || o.expanding[s.Name] {
				continue
			}
			o.reached[s.Name] = true
			o.expanding[s.Name] = true
			o.collect(g, f.SelectionSet)
			delete(o.expanding, s.Name)
		}
	}
}

// checkSet checks one selection set (an operation's or an unused
// fragment's) and everything under it.
func (o *overlap) checkSet(set ast.SelectionSet) {
	var g responseGroups
	o.collect(&g, set)
	g.each(o.sameShape)
	g.each(o.sameForCommonParents)
}

// done reports whether the check should stop: enough conflicts, or the
// budget spent.
func (o *overlap) done() bool {
	if o.budget < 0 && !o.exhausted {
		o.exhausted = true
		o.conflicts = append(o.conflicts, conflict{message: "The document selects the same fields through " +
			"interfaces and unions too many times to be validated; select fewer."})
	}
	return o.exhausted || len(o.conflicts) >= maxConflicts
}

// sameShape checks SameResponseShape over fields, which share a response
// name, and over their merged sub-selections.
func (o *overlap) sameShape(fields []*ast.Field) {
	if o.done() {
		return
	}
	var first *ast.Field
	var firstShape string
	var sub responseGroups
	for _, f := range fields {
		if f.ObjectDefinition == nil {
			continue
		}
		if f.Definition != nil {
			s := typeShape(o.schema, f.Definition.Type)
			switch {
			case first == nil:
				first, firstShape = f, s
			case s != firstShape:
				o.add(f, 't', fmt.Sprintf(`they return conflicting types "%s" and "%s"`,
					first.Definition.Type.String(), f.Definition.Type.String()))
			}
		}
		o.collect(&sub, f.SelectionSet)
	}
	sub.each(o.sameShape)
}

// sameForCommonParents checks the fields, which share a response name, whose
// parents are not two different object types: same name, same arguments,
// and sub-selections that merge.
func (o *overlap) sameForCommonParents(fields []*ast.Field) {
	if o.done() {
		return
	}
	var common []*ast.Field
	var types []string
	var byType map[string][]*ast.Field
	for _, f := range fields {
		switch {
		case f.ObjectDefinition == nil:
		case f.ObjectDefinition.Kind == ast.Object && f.Definition != nil:
			t := f.ObjectDefinition.Name
			if byType == nil {
				byType = map[string][]*ast.Field{}
			}
			if _, ok := byType[t]; !ok {
				types = append(types, t)
			}
			byType[t] = append(byType[t], f)
		default:
			common = append(common, f)
		}
	}
	if len(types) == 0 {
		o.identical(common)
		return
	}
	for _, t := range types {
		o.identical(append(slices.Clip(byType[t]), common...))
	}
}

// identical checks that fields, no two of which are mutually exclusive, are
// the same field with the same arguments, and that their sub-selections
// merge.
func (o *overlap) identical(fields []*ast.Field) {
	if len(fields) == 0 || o.done() {
		return
	}
	first := fields[0]
	var firstArgs string
	if len(fields) > 1 {
		firstArgs = argumentsKey(first.Arguments)
	}
	var sub responseGroups
	for i, f := range fields {
		if i > 0 {
			switch {
			case f.Name != first.Name:
				o.add(f, 'n', fmt.Sprintf(`"%s" and "%s" are different fields`, first.Name, f.Name))
			case argumentsKey(f.Arguments) != firstArgs:
				o.add(f, 'a', "they have differing arguments")
			}
		}
		o.collect(&sub, f.SelectionSet)
	}
	sub.each(o.sameForCommonParents)
}

func (o *overlap) add(f *ast.Field, kind uint8, reason string) {
	k := conflictKey{f, kind}
	if o.seen[k] || len(o.conflicts) >= maxConflicts {
		return
	}
	o.seen[k] = true
	o.conflicts = append(o.conflicts, conflict{field: f, message: fmt.Sprintf(
		`Fields "%s" conflict because %s. Use different aliases on the fields to fetch both if this was intentional.`,
		f.Alias, reason)})
}

// typeShape is what SameResponseShape compares of a type: the list and
// non-null wrappers, and the named type if it is a leaf (two composite types
// are compared through their fields). Two types conflict, as in gqlparser's
// doTypesConflict, iff their shapes differ.
func typeShape(schema *ast.Schema, t *ast.Type) string {
	var b strings.Builder
	for ; t != nil; t = t.Elem {
		if t.NonNull {
			b.WriteByte('!')
		}
		if t.Elem != nil {
			b.WriteByte('[')
			continue
		}
		if def := schema.Types[t.NamedType]; def != nil && !def.IsLeafType() {
			b.WriteByte('*')
		} else {
			b.WriteString(t.NamedType)
		}
	}
	return b.String()
}

// argumentsKey is a canonical text of a field's arguments: two argument
// lists are the same, as gqlparser's sameArguments decides for lists without
// duplicate names, iff their keys are equal. Arguments and object fields are
// sorted by name, list items kept in order, each value's kind and raw text
// written with its length so no two values run together.
func argumentsKey(args ast.ArgumentList) string {
	if len(args) == 0 {
		return ""
	}
	sorted := slices.Clone(args)
	slices.SortStableFunc(sorted, func(a, b *ast.Argument) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, a := range sorted {
		writeText(&b, a.Name)
		writeValue(&b, a.Value)
	}
	return b.String()
}

func writeValue(b *strings.Builder, v *ast.Value) {
	if v == nil {
		b.WriteByte('-')
		return
	}
	b.WriteString(strconv.Itoa(int(v.Kind)))
	writeText(b, v.Raw)
	children := v.Children
	if v.Kind == ast.ObjectValue {
		children = slices.Clone(children)
		slices.SortStableFunc(children, func(x, y *ast.ChildValue) int { return strings.Compare(x.Name, y.Name) })
	}
	b.WriteByte('(')
	for _, c := range children {
		writeText(b, c.Name)
		writeValue(b, c.Value)
	}
	b.WriteByte(')')
}

func writeText(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}
