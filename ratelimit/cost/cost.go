// Package cost computes the query cost of a GraphQL operation from the
// schema's @cost and @listSize directives (the Rate limits section of the
// contract, docs/api.md#rate-limits-and-query-cost). It depends on gqlparser only, so it fuzzes fast.
package cost

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// Cost constants of the contract (docs/api.md#rate-limits-and-query-cost).
const (
	// MutationFieldCost is what a mutation field costs before its selection.
	MutationFieldCost = 10
	// IntrospectionCost is the fixed cost of a __schema or __type field.
	IntrospectionCost = 10
	// DefaultListSize multiplies a list with no slicing argument and no declared size.
	DefaultListSize = 10
	// saturated is the ceiling of every cost: arithmetic never wraps.
	saturated = math.MaxInt64 / 4
	// Saturated is the ceiling every cost stays under.
	Saturated = saturated
)

// Operation returns the cost of op, a validated operation of doc, with the coerced
// variables vars, following the Rate limits section of the contract. The cost
// model is read from the schema's @cost and @listSize directives on each field
// definition (the validator links every field to its definition):
//
//   - a field returning an object or a list of objects costs 1 (a mutation root
//     field 10), a scalar or enum field 0, unless @cost(weight) says otherwise;
//   - a list or connection multiplies the cost of its selection by its slicing
//     argument (first by default; variables resolved, the argument's default
//     applied when it is absent or null), else by @listSize(assumedSize), else by 10; the fields a
//     connection names in sizedFields are not multiplied again;
//   - __schema and __type cost 10 each for up to IntrospectionFields fields
//     they resolve in s (counted against the schema's types), and a point
//     for every IntrospectionFieldsPerPoint fields past that; __typename
//     nothing. With s nil they cost a fixed 10;
//   - aliases and fragments count each time they are selected; a named
//     fragment is costed once and memoised, so the walk is linear in the size
//     of the document; all arithmetic saturates.
func Operation(s *ast.Schema, op *ast.OperationDefinition, vars map[string]any) int64 {
	price, _ := Check(s, op, vars, nil)
	return price
}

// Range is the values a slicing argument may take, Min to Max inclusive:
// the page sizes the resolvers accept.
type Range struct {
	Min, Max int64
}

// OutOfRange is a slicing argument (first) whose value a field the
// operation would run refuses: the field would answer BAD_USER_INPUT as it
// ran, after the operation was charged and its other fields ran.
type OutOfRange struct {
	// Argument names the argument (first).
	Argument string
	// Value is its value, the variable's when it is one.
	Value int64
	// Range is what it may be.
	Range Range
	// Position is where the argument's value is written in the document
	// (the variable, when it is one).
	Position *ast.Position
}

// Check is Operation that also finds, in the same walk, the first slicing
// argument whose value (a literal, a variable's, never a default nor a
// null, which stand for the default) is outside r, on a field the operation
// would run: a field, inline fragment or fragment spread that @skip(if:
// true) or @include(if: false) leaves out is priced, as Operation prices
// it, but not checked. r nil checks nothing. Every slicing argument of the
// schema is a page size, bounded alike.
func Check(s *ast.Schema, op *ast.OperationDefinition, vars map[string]any, r *Range) (int64, *OutOfRange) {
	if op == nil {
		return 0, nil
	}
	w := walker{vars: vars, memo: map[memoKey]int64{}, schema: s, bounds: r}
	return w.selection(op.SelectionSet, op.Operation == ast.Mutation), w.bad
}

type walker struct {
	vars map[string]any
	memo map[memoKey]int64
	// bounds is the range slicing arguments are checked against (nil: not
	// checked); bad is the first found outside it, and leftOut counts the
	// selections being walked that @skip or @include leave out (nothing
	// under them is checked).
	bounds  *Range
	bad     *OutOfRange
	leftOut int
	// schema is what introspection is counted against (nil: a fixed
	// price); intro counts, made at the first introspection field, so that
	// the operations without one allocate nothing for it.
	schema *ast.Schema
	intro  *introspection
	// eventRoot is set while the root fields of a subscription are costed
	// per event (Event): their @cost weight is the price of subscribing, not
	// of each event.
	eventRoot bool
}

// Event returns what each event of op, a validated subscription, costs: the
// cost of its selection as a query would have it, the root field counting
// 1 (an object) whatever its @cost weight, which is the price of
// subscribing (Operation).
func Event(op *ast.OperationDefinition, vars map[string]any) int64 {
	if op == nil {
		return 0
	}
	w := walker{vars: vars, memo: map[memoKey]int64{}, eventRoot: true}
	return w.selection(op.SelectionSet, false)
}

// selection costs a selection set; root says whether it is the root of a mutation.
func (w *walker) selection(set ast.SelectionSet, root bool) int64 {
	var total int64
	for _, sel := range set {
		out := w.enter(sel)
		switch s := sel.(type) {
		case *ast.Field:
			total = Add(total, w.field(s, root, false))
		case *ast.InlineFragment:
			total = Add(total, w.selection(s.SelectionSet, root))
		case *ast.FragmentSpread:
			total = Add(total, w.fragment(s, root))
		}
		w.leave(out)
	}
	return total
}

// enter notes that the walk enters sel, and returns whether @skip or
// @include leave it out (to give leave). Only a check looks.
func (w *walker) enter(sel ast.Selection) bool {
	if w.bounds == nil {
		return false
	}
	var dirs ast.DirectiveList
	switch s := sel.(type) {
	case *ast.Field:
		dirs = s.Directives
	case *ast.InlineFragment:
		dirs = s.Directives
	case *ast.FragmentSpread:
		dirs = s.Directives
	}
	if len(dirs) == 0 || !leftOut(dirs, w.vars) {
		return false
	}
	w.leftOut++
	return true
}

// leave notes that the walk left a selection enter saw left out.
func (w *walker) leave(out bool) {
	if out {
		w.leftOut--
	}
}

// leftOut reports whether dirs leave their selection out of the result:
// @skip(if: true) or @include(if: false), as gqlgen collects fields.
func leftOut(dirs ast.DirectiveList, vars map[string]any) bool {
	cond := func(name string) (bool, bool) {
		d := dirs.ForName(name)
		if d == nil {
			return false, false
		}
		a := d.Arguments.ForName("if")
		if a == nil || a.Value == nil {
			return false, false
		}
		v, err := a.Value.Value(vars)
		b, ok := v.(bool)
		return b, ok && err == nil
	}
	if skip, ok := cond("skip"); ok && skip {
		return true
	}
	if include, ok := cond("include"); ok && !include {
		return true
	}
	return false
}

// memoKey is what a named fragment's cost is memoised by: its name, whether
// it is spread at the root of a mutation, and whether its walk checked its
// slicing arguments.
type memoKey struct {
	name          string
	root, checked bool
}

func (w *walker) fragment(s *ast.FragmentSpread, root bool) int64 {
	if s.Definition == nil {
		return 0
	}
	// Walked where it runs, it is checked: a walk of it left out checked
	// nothing, and is memoised apart.
	key := memoKey{name: s.Name, root: root, checked: w.bounds != nil && w.leftOut == 0}
	if c, ok := w.memo[key]; ok {
		return c
	}
	// A cycle is invalid (validation rejects it); guard anyway with a zero
	// placeholder so a cycle can never recurse forever.
	w.memo[key] = 0
	c := w.selection(s.Definition.SelectionSet, root)
	w.memo[key] = c
	return c
}

// field costs one selected field; sized says the parent connection already
// multiplied this list by its slicing argument.
func (w *walker) field(f *ast.Field, root, sized bool) int64 {
	switch f.Name {
	case "__typename":
		return 0
	case "__schema", "__type":
		if w.schema == nil {
			return IntrospectionCost
		}
		if w.intro == nil {
			w.intro = &introspection{s: w.schema, vars: w.vars, memo: map[typeKey]int64{}}
		}
		n := w.intro.root(f)
		if n <= IntrospectionFields {
			return IntrospectionCost
		}
		return Add(IntrospectionCost, (n-IntrospectionFields-1)/IntrospectionFieldsPerPoint+1)
	}
	def := f.Definition
	if def == nil || def.Type == nil {
		return 0
	}
	var base int64
	eventRoot := w.eventRoot
	if eventRoot {
		w.eventRoot = false // the root field's selection is not the root
		defer func() { w.eventRoot = true }()
	}
	if weight, ok := directiveInt(def, "cost", "weight"); ok && !eventRoot {
		base = max(weight, 0)
	} else if isComposite(f) {
		base = 1
	}
	if root {
		if _, ok := directiveInt(def, "cost", "weight"); !ok {
			base = MutationFieldCost
		}
	}
	if len(f.SelectionSet) == 0 {
		return base
	}
	// The selection: children, with the connection's sized fields not multiplied again.
	var sizedFields map[string]bool
	if ls := def.Directives.ForName("listSize"); ls != nil {
		if a := ls.Arguments.ForName("sizedFields"); a != nil && a.Value != nil {
			for _, c := range a.Value.Children {
				if c.Value != nil {
					if sizedFields == nil {
						sizedFields = map[string]bool{}
					}
					sizedFields[c.Value.Raw] = true
				}
			}
		}
	}
	children := w.children(f.SelectionSet, sizedFields)
	return Add(base, mul(w.multiplier(f, sized), children))
}

// children costs a field's selection set, marking the sized fields.
func (w *walker) children(set ast.SelectionSet, sizedFields map[string]bool) int64 {
	if sizedFields == nil {
		return w.selection(set, false)
	}
	var total int64
	for _, sel := range set {
		out := w.enter(sel)
		switch s := sel.(type) {
		case *ast.Field:
			total = Add(total, w.field(s, false, sizedFields[s.Name]))
		case *ast.InlineFragment:
			total = Add(total, w.children(s.SelectionSet, sizedFields))
		case *ast.FragmentSpread:
			// Fragments on a connection type are rare; cost them without
			// memoising the sized variant (the memo is keyed by name only).
			if s.Definition != nil {
				total = Add(total, w.children(s.Definition.SelectionSet, sizedFields))
			}
		}
		w.leave(out)
	}
	return total
}

// multiplier is how many times a field's selection counts.
func (w *walker) multiplier(f *ast.Field, sized bool) int64 {
	def := f.Definition
	assumed := int64(-1)
	if n, ok := directiveInt(def, "listSize", "assumedSize"); ok {
		assumed = max(n, 0)
	}
	if slicing := slicingArgument(def); slicing != "" {
		if n, ok := w.argument(f, slicing); ok {
			w.check(f, slicing, n)
			return max(n, 0)
		}
		if assumed >= 0 {
			return assumed
		}
		return DefaultListSize
	}
	if def.Type.Elem == nil || sized {
		return 1
	}
	if assumed >= 0 {
		return assumed
	}
	return DefaultListSize
}

// check records n, the value of the slicing argument name of f, when it is
// the first found outside the walk's bounds on a field that runs. The
// argument's default is in range; a null stands for it.
func (w *walker) check(f *ast.Field, name string, n int64) {
	if w.bounds == nil || w.bad != nil || w.leftOut > 0 || (n >= w.bounds.Min && n <= w.bounds.Max) {
		return
	}
	a := f.Arguments.ForName(name)
	if a == nil || a.Value == nil {
		return // the default
	}
	w.bad = &OutOfRange{Argument: name, Value: n, Range: *w.bounds, Position: a.Value.Position}
}

// slicingArgument names the argument that sizes a list field of def: its
// @listSize slicingArgument, else first when it has one, else "" (the list
// is priced by its declared size).
func slicingArgument(def *ast.FieldDefinition) string {
	if ls := def.Directives.ForName("listSize"); ls != nil {
		if a := ls.Arguments.ForName("slicingArgument"); a != nil && a.Value != nil && a.Value.Raw != "" {
			return a.Value.Raw
		}
	}
	if def.Arguments.ForName("first") != nil {
		return "first"
	}
	return ""
}

// argument returns the integer value of a field argument: the literal, the
// variable's value, or the argument's default. An explicit null (a literal
// null, or a variable sent as null) counts as no value: the resolvers read a
// null slicing argument as its default (store's page size), so it is priced
// as the default too.
func (w *walker) argument(f *ast.Field, name string) (int64, bool) {
	if a := f.Arguments.ForName(name); a != nil && a.Value != nil {
		var v any
		var err error
		if a.Value.Kind == ast.Variable {
			v = w.vars[a.Value.Raw]
		} else {
			v, err = a.Value.Value(w.vars)
		}
		if err == nil && v != nil {
			return toInt(v)
		}
	}
	if d := f.Definition.Arguments.ForName(name); d != nil && d.DefaultValue != nil {
		v, err := d.DefaultValue.Value(nil)
		if err == nil {
			return toInt(v)
		}
	}
	return 0, false
}

// isComposite reports whether the field returns an object, interface or union
// (or a list of them): in a validated document exactly those select sub-fields.
func isComposite(f *ast.Field) bool { return len(f.SelectionSet) > 0 }

func directiveInt(def *ast.FieldDefinition, directive, arg string) (int64, bool) {
	d := def.Directives.ForName(directive)
	if d == nil {
		return 0, false
	}
	a := d.Arguments.ForName(arg)
	if a == nil || a.Value == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(a.Value.Raw, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// toInt reads an integer out of a coerced variable or literal value; a value
// too large saturates, so a huge first is never under-charged.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n >= float64(saturated) {
			return saturated, true
		}
		return int64(n), true
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		if f, err := n.Float64(); err == nil {
			return toInt(f)
		}
		if !strings.HasPrefix(string(n), "-") {
			return saturated, true
		}
		return 0, true
	case string:
		if i, err := strconv.ParseInt(n, 10, 64); err == nil {
			return i, true
		}
	}
	return 0, false
}

// Add adds two costs, saturating.
func Add(a, b int64) int64 {
	if a >= saturated-b {
		return saturated
	}
	return a + b
}

func mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a >= saturated/b {
		return saturated
	}
	return a * b
}

// Overrun returns what the list field f, a field of a validated operation
// (with the coerced variables vars), costs past its price when it returned n
// items: the cost of its selection for each item beyond the size Operation
// priced it at. Only a list priced by its declared size (@listSize
// assumedSize, or DefaultListSize) can overrun; a list or connection priced by
// a slicing argument never returns more than it asks for, and a list within
// its size costs nothing more (nothing is refunded either).
func Overrun(f *ast.Field, vars map[string]any, n int) int64 {
	if f == nil || f.Definition == nil || f.Definition.Type == nil || f.Definition.Type.Elem == nil ||
		len(f.SelectionSet) == 0 || slicingArgument(f.Definition) != "" {
		return 0
	}
	w := walker{vars: vars, memo: map[memoKey]int64{}}
	extra := int64(n) - w.multiplier(f, false)
	if extra <= 0 {
		return 0
	}
	return mul(extra, w.selection(f.SelectionSet, false))
}
