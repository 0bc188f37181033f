package querydoc

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// mergeSchema has what field merging depends on: interfaces and a union
// (fields that are not mutually exclusive across types), fields of one name
// with different types on different objects (size: Int and Float, tag:
// String! and [String]), leaf and composite results of one name (owner),
// arguments, lists and non-null wrappers.
var mergeSchema = gqlparser.MustLoadSchema(&ast.Source{Name: "merge.graphql", Input: `
interface Node { id: ID! }
interface Pet { name: String, owner: Person, friends(first: Int): [Pet] }
type Dog implements Pet & Node {
  id: ID!, name: String, barks: Boolean, owner: Person, friends(first: Int): [Pet],
  size(unit: Unit): Int, tag: String!, mate: Dog
}
type Cat implements Pet & Node {
  id: ID!, name: String, meows: Boolean, owner: Person, friends(first: Int): [Pet],
  size(unit: Unit): Float, tag: [String], mate: Cat
}
type Bird implements Node { id: ID!, name: String!, owner: String, size(unit: Unit): Int }
union Animal = Dog | Cat | Bird
type Person implements Node {
  id: ID!, name: String, pets(first: Int): [Pet], dog: Dog, cat: Cat, animal: Animal, best: Pet,
  size(unit: Unit): Int
}
enum Unit { CM IN }
type Query {
  person(id: ID): Person, pet: Pet, animal: Animal, dog: Dog, cat: Cat,
  node(id: ID): Node, people: [Person!]!, size(unit: Unit): Int
}
`})

// overlapVerdict reports whether gqlparser's rule and the linear rule each
// find a conflict in query.
func overlapVerdict(t testing.TB, schema *ast.Schema, query string) (stock, linear bool, stockErrs, linearErrs gqlerror.List) {
	t.Helper()
	doc, err := parser.ParseQuery(&ast.Source{Input: query})
	if err != nil {
		t.Fatalf("generated an unparsable document: %v\n%s", err, query)
	}
	stockErrs = validator.ValidateWithRules(schema, doc, rules.NewRules(rules.OverlappingFieldsCanBeMergedRule))
	shape := Measure(doc, 0)
	linearErrs = validator.ValidateWithRules(schema, doc, rules.NewRules(overlapRule(&shape, saturation)))
	return len(stockErrs) > 0, len(linearErrs) > 0, stockErrs, linearErrs
}

// TestOverlapAgreesWithGqlparserOnRandomDocuments generates small documents
// of fields that share response names (aliases from a pool of two), with
// arguments, inline fragments and named fragments over mergeSchema, and
// checks that the linear rule finds a conflict exactly when gqlparser's
// does. The seed is fixed: the corpus is the same on every run.
func TestOverlapAgreesWithGqlparserOnRandomDocuments(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 2026))
	conflicts := 0
	const documents = 3000
	for range documents {
		if agree(t, r) {
			conflicts++
		}
	}
	// The corpus must exercise both outcomes, or the test proves little.
	t.Logf("%d of %d documents conflict", conflicts, documents)
	if conflicts < documents/10 || conflicts > documents*9/10 {
		t.Fatalf("%d of %d documents conflict: the generator is off balance", conflicts, documents)
	}
}

// FuzzOverlapAgreesWithGqlparser is the same comparison from any seed (runs
// of 200,000 and 270,000 documents found no disagreement):
//
//	go test ./querydoc -run '^$' -fuzz FuzzOverlapAgreesWithGqlparser -fuzztime 5m
func FuzzOverlapAgreesWithGqlparser(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(77), uint64(2026))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		for range 20 {
			agree(t, r)
		}
	})
}

// agree generates a document and fails t unless both rules find a conflict
// in it or neither does; it reports whether they did.
func agree(t *testing.T, r *rand.Rand) bool {
	t.Helper()
	q := (&docGen{r: r, schema: mergeSchema}).document()
	stock, linear, stockErrs, linearErrs := overlapVerdict(t, mergeSchema, q)
	if stock != linear {
		t.Fatalf("gqlparser finds a conflict: %v, the linear rule: %v\n%s\ngqlparser: %v\nlinear: %v",
			stock, linear, q, stockErrs, linearErrs)
	}
	return stock
}

// docGen generates a random document over a schema.
type docGen struct {
	r      *rand.Rand
	schema *ast.Schema
	frags  []genFragment
	b      strings.Builder
}

// rootFieldFor is a field of Query whose type a fragment on the type fits.
var rootFieldFor = map[string]string{
	"Dog": "dog", "Cat": "cat", "Pet": "pet", "Person": "person", "Animal": "animal", "Node": "node", "Bird": "animal",
}

type genFragment struct {
	name, on string
}

func (g *docGen) document() string {
	// Fragments first, each may spread only the ones before it: no cycles.
	types := []string{"Dog", "Cat", "Pet", "Person", "Animal", "Node", "Bird"}
	var defs []string
	for i := range g.r.IntN(4) {
		on := types[g.r.IntN(len(types))]
		g.b.Reset()
		g.selectionSet(g.schema.Types[on], 0)
		defs = append(defs, fmt.Sprintf("fragment F%d on %s %s", i, on, g.b.String()))
		g.frags = append(g.frags, genFragment{name: fmt.Sprintf("F%d", i), on: on})
	}
	g.b.Reset()
	g.selectionSet(g.schema.Query, 0)
	op := "query " + strings.TrimSuffix(g.b.String(), "}")
	// Every fragment is spread: gqlparser does not look into the fields of a
	// fragment no operation spreads (NoUnusedFragments refuses it anyway).
	for _, f := range g.frags {
		op += fmt.Sprintf(" %s { ...%s }", rootFieldFor[f.on], f.name)
	}
	return op + " }\n" + strings.Join(defs, "\n")
}

func (g *docGen) selectionSet(def *ast.Definition, depth int) {
	g.b.WriteString("{")
	n := 1 + g.r.IntN(4)
	for range n {
		g.b.WriteString(" ")
		switch k := g.r.IntN(10); {
		case k < 7 || depth >= 3:
			g.field(def, depth)
		case k < 9:
			g.inlineFragment(def, depth)
		default:
			g.spread(def, depth)
		}
	}
	g.b.WriteString(" }")
}

func (g *docGen) field(def *ast.Definition, depth int) {
	if def.Kind == ast.Union || g.r.IntN(12) == 0 {
		g.alias()
		g.b.WriteString("__typename")
		return
	}
	f := def.Fields[g.r.IntN(len(def.Fields))]
	if strings.HasPrefix(f.Name, "__") {
		g.b.WriteString("__typename")
		return
	}
	g.alias()
	g.b.WriteString(f.Name)
	if len(f.Arguments) > 0 && g.r.IntN(2) == 0 {
		a := f.Arguments[0]
		var v string
		switch a.Type.Name() {
		case "Int":
			v = []string{"1", "2", "$n"}[g.r.IntN(3)]
		case "ID":
			v = []string{`"1"`, `"2"`, "1"}[g.r.IntN(3)]
		case "Unit":
			v = []string{"CM", "IN"}[g.r.IntN(2)]
		}
		fmt.Fprintf(&g.b, "(%s: %s)", a.Name, v)
	}
	sub := g.schema.Types[f.Type.Name()]
	if !sub.IsLeafType() {
		if depth >= 3 {
			g.b.WriteString(" { __typename }")
			return
		}
		g.selectionSet(sub, depth+1)
	}
}

func (g *docGen) alias() {
	switch g.r.IntN(8) {
	case 0:
		g.b.WriteString("a: ")
	case 1:
		g.b.WriteString("b: ")
	}
}

func (g *docGen) inlineFragment(def *ast.Definition, depth int) {
	var on []*ast.Definition
	for _, t := range g.schema.Types {
		if (t.Kind == ast.Object || t.Kind == ast.Interface || t.Kind == ast.Union) && !strings.HasPrefix(t.Name, "__") &&
			t.Name != "Query" && overlaps(g.schema, def, t) {
			on = append(on, t)
		}
	}
	if len(on) == 0 || g.r.IntN(4) == 0 {
		g.b.WriteString("... ")
		g.selectionSet(def, depth)
		return
	}
	t := on[g.r.IntN(len(on))]
	g.b.WriteString("... on " + t.Name + " ")
	g.selectionSet(t, depth)
}

func (g *docGen) spread(def *ast.Definition, depth int) {
	var fit []genFragment
	for _, f := range g.frags {
		if overlaps(g.schema, def, g.schema.Types[f.on]) {
			fit = append(fit, f)
		}
	}
	if len(fit) == 0 {
		g.field(def, depth)
		return
	}
	g.b.WriteString("..." + fit[g.r.IntN(len(fit))].name)
}

// overlaps reports whether some object type is possible for both a and b.
func overlaps(s *ast.Schema, a, b *ast.Definition) bool {
	for _, x := range s.GetPossibleTypes(a) {
		for _, y := range s.GetPossibleTypes(b) {
			if x.Name == y.Name {
				return true
			}
		}
	}
	return false
}

// TestOverlapBudget checks that fields on an interface, visited once per
// object type beside them, spend the rule's budget, and that a document over
// it is refused with an error instead of being walked on.
func TestOverlapBudget(t *testing.T) {
	t.Parallel()
	// x on Pet joins both x on Dog and x on Cat: its subtree is merged twice,
	// at every level.
	q := "{ pet { " + strings.Repeat("... on Dog { x: friends { ", 6) + "name" + strings.Repeat(" } }", 6) +
		" " + strings.Repeat("... on Cat { x: friends { ", 6) + "name" + strings.Repeat(" } }", 6) +
		" " + strings.Repeat("x: friends { ", 6) + "name" + strings.Repeat(" }", 6) + " } }"
	doc, err := parser.ParseQuery(&ast.Source{Input: q})
	if err != nil {
		t.Fatal(err)
	}
	shape := Measure(doc, 0)
	run := func(budget int) gqlerror.List {
		d, _ := parser.ParseQuery(&ast.Source{Input: q})
		return validator.ValidateWithRules(mergeSchema, d, rules.NewRules(overlapRule(&shape, budget)))
	}
	if errs := run(1000); len(errs) != 0 {
		t.Fatalf("within the budget: %v", errs)
	}
	errs := run(shape.Selections)
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "too many times to be validated") {
		t.Fatalf("over the budget: %v", errs)
	}
}
