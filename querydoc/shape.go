package querydoc

import (
	"slices"

	"github.com/vektah/gqlparser/v2/ast"
)

// Shape is what Measure finds in a parsed document: the sizes its Limits
// bound, and the node count the document cache weighs it by.
type Shape struct {
	// Nodes counts the document as written: operations, fragment
	// definitions, selections, arguments, values (each element of a list or
	// object too), directives, variable definitions and comments.
	Nodes int
	// Walk counts the nodes gqlparser's validator visits: every operation
	// and every fragment definition with the fragments it reaches, each of
	// those once. A fragment spread by three operations is visited four
	// times. It stops growing once it passes the limit Measure was given.
	Walk int
	// Selections counts the fields of the operations, and of the fragments
	// no operation spreads, with every fragment expanded where it is spread
	// (a fragment spread twice counts twice). It saturates at MaxInt32.
	Selections int
	// Depth is the deepest nesting of fields, through fragments.
	Depth int
	// Aliases counts the aliased fields as written.
	Aliases int
	// Directives is the most directives at one location.
	Directives int
	// Variables is the most variable definitions of one operation.
	Variables int
	// Cycle reports a fragment that spreads itself, directly or through
	// others (the validator refuses the document; NoFragmentCycles).
	Cycle bool
}

// saturation bounds Selections, so that a document whose fragments double
// at every level cannot overflow the count.
const saturation = 1<<31 - 1

// definition is what one operation or fragment definition holds itself,
// without the fragments it spreads.
type definition struct {
	nodes      int
	selections int
	depth      int      // deepest field nesting within the definition itself
	spreads    []spread // the fragment spreads in it, in document order
}

// spread is a fragment spread at a nesting depth of a definition.
type spread struct {
	name  string
	depth int // fields enclosing the spread within its definition
}

// measurer holds the state of one Measure.
type measurer struct {
	shape     Shape
	fragments map[string]*definition // by name, the first of duplicates (as the validator does)
	// expanded and height memoise Selections and Depth of each fragment;
	// state marks the fragments being expanded (1) and done (2).
	expanded map[string]int
	height   map[string]int
	state    map[string]uint8
	// visitedBy marks the fragments the Walk of one definition reached, by
	// the definition's number (1-based), so that no set is allocated per
	// definition.
	visitedBy map[string]int
	reached   map[string]bool // fragments some operation spreads, directly or not
}

// Measure returns doc's Shape. The walk is linear in the size of doc: each
// definition is read once, and Walk is computed by a search from each
// definition that stops as soon as the total passes walkLimit (zero: no
// limit), so a document of chained fragments does not cost the square of its
// size here.
func Measure(doc *ast.QueryDocument, walkLimit int) Shape {
	m := &measurer{
		fragments: make(map[string]*definition, len(doc.Fragments)),
		expanded:  make(map[string]int, len(doc.Fragments)),
		height:    make(map[string]int, len(doc.Fragments)),
		state:     make(map[string]uint8, len(doc.Fragments)),
		visitedBy: make(map[string]int, len(doc.Fragments)),
		reached:   make(map[string]bool, len(doc.Fragments)),
	}
	ops := make([]*definition, len(doc.Operations))
	for i, op := range doc.Operations {
		ops[i] = m.definition(op.Comment, op.VariableDefinitions, op.Directives, op.SelectionSet)
	}
	frags := make([]*definition, len(doc.Fragments))
	for i, f := range doc.Fragments {
		frags[i] = m.definition(f.Comment, f.VariableDefinition, f.Directives, f.SelectionSet)
		if _, dup := m.fragments[f.Name]; !dup {
			m.fragments[f.Name] = frags[i]
		}
	}
	all := append(slices.Clip(ops), frags...)
	for _, d := range all {
		m.shape.Nodes += d.nodes
	}

	for _, d := range ops {
		m.shape.Selections = addSat(m.shape.Selections, m.expand(d))
		m.shape.Depth = max(m.shape.Depth, m.depth(d))
		m.markReached(d)
	}
	for i, f := range doc.Fragments {
		m.shape.Depth = max(m.shape.Depth, m.depth(frags[i]))
		if !m.reached[f.Name] {
			m.shape.Selections = addSat(m.shape.Selections, m.expand(frags[i]))
		}
	}

	for n, d := range all {
		if m.walk(d, n+1, walkLimit) {
			break
		}
	}
	return m.shape
}

// definition reads what an operation or fragment definition holds itself.
func (m *measurer) definition(comment *ast.CommentGroup, vars ast.VariableDefinitionList, dirs ast.DirectiveList,
	set ast.SelectionSet,
) *definition {
	d := &definition{nodes: 1 + comments(comment)}
	m.variables(d, vars)
	m.directives(d, dirs)
	m.selectionSet(d, set, 0)
	return d
}

// walk adds to Walk the nodes of d and of every fragment it reaches, each
// once; it reports whether Walk passed limit (then it stopped early).
func (m *measurer) walk(d *definition, n, limit int) bool {
	m.shape.Walk += d.nodes
	stack := []*definition{d}
	for len(stack) > 0 && (limit <= 0 || m.shape.Walk <= limit) {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range top.spreads {
			f := m.fragments[s.name]
			if f == nil || m.visitedBy[s.name] == n {
				continue
			}
			m.visitedBy[s.name] = n
			m.shape.Walk += f.nodes
			stack = append(stack, f)
		}
	}
	return limit > 0 && m.shape.Walk > limit
}

// markReached marks every fragment d reaches.
func (m *measurer) markReached(d *definition) {
	stack := []*definition{d}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range top.spreads {
			f := m.fragments[s.name]
			if f == nil || m.reached[s.name] {
				continue
			}
			m.reached[s.name] = true
			stack = append(stack, f)
		}
	}
}

// expand returns the selections of d with its fragments expanded where they
// are spread; a spread that closes a cycle counts nothing (and sets Cycle).
func (m *measurer) expand(d *definition) int {
	n := d.selections
	for _, s := range d.spreads {
		n = addSat(n, m.fragmentSelections(s.name))
	}
	return n
}

func (m *measurer) fragmentSelections(name string) int {
	f := m.fragments[name]
	if f == nil {
		return 0
	}
	switch m.state[name] {
	case 1:
		m.shape.Cycle = true
		return 0
	case 2:
		return m.expanded[name]
	}
	m.state[name] = 1
	n := m.expand(f)
	m.expanded[name] = n
	m.state[name] = 2
	return n
}

// depth returns the deepest field nesting of d through its fragments; a
// spread that closes a cycle adds nothing (expand, run first, saw it).
func (m *measurer) depth(d *definition) int {
	h := d.depth
	for _, s := range d.spreads {
		h = max(h, s.depth+m.fragmentDepth(s.name))
	}
	return h
}

func (m *measurer) fragmentDepth(name string) int {
	f := m.fragments[name]
	if f == nil {
		return 0
	}
	if h, ok := m.height[name]; ok {
		return h
	}
	m.height[name] = 0 // a cycle back to name adds nothing
	h := m.depth(f)
	m.height[name] = h
	return h
}

func (m *measurer) selectionSet(d *definition, set ast.SelectionSet, depth int) {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			d.nodes += 1 + comments(s.Comment)
			d.selections++
			d.depth = max(d.depth, depth+1)
			if s.Alias != "" && s.Alias != s.Name {
				m.shape.Aliases++
			}
			m.arguments(d, s.Arguments)
			m.directives(d, s.Directives)
			m.selectionSet(d, s.SelectionSet, depth+1)
		case *ast.InlineFragment:
			d.nodes += 1 + comments(s.Comment)
			m.directives(d, s.Directives)
			m.selectionSet(d, s.SelectionSet, depth)
		case *ast.FragmentSpread:
			d.nodes += 1 + comments(s.Comment)
			m.directives(d, s.Directives)
			d.spreads = append(d.spreads, spread{name: s.Name, depth: depth})
		}
	}
}

func (m *measurer) variables(d *definition, vars ast.VariableDefinitionList) {
	m.shape.Variables = max(m.shape.Variables, len(vars))
	for _, v := range vars {
		d.nodes += 1 + comments(v.Comment)
		if v.DefaultValue != nil {
			m.value(d, v.DefaultValue)
		}
		m.directives(d, v.Directives)
	}
}

func (m *measurer) directives(d *definition, dirs ast.DirectiveList) {
	m.shape.Directives = max(m.shape.Directives, len(dirs))
	for _, dir := range dirs {
		d.nodes++
		m.arguments(d, dir.Arguments)
	}
}

func (m *measurer) arguments(d *definition, args ast.ArgumentList) {
	for _, a := range args {
		d.nodes += 1 + comments(a.Comment)
		if a.Value != nil {
			m.value(d, a.Value)
		}
	}
}

func (m *measurer) value(d *definition, v *ast.Value) {
	d.nodes += 1 + comments(v.Comment)
	for _, c := range v.Children {
		d.nodes += comments(c.Comment)
		if c.Value != nil {
			m.value(d, c.Value)
		}
	}
}

// comments counts the comments of a group (each is kept in the document).
func comments(g *ast.CommentGroup) int {
	if g == nil {
		return 0
	}
	return len(g.List)
}

func addSat(a, b int) int {
	if a >= saturation-b {
		return saturation
	}
	return a + b
}
