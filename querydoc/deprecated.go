package querydoc

import (
	"slices"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// Deprecated is a field or an argument of the schema marked @deprecated.
type Deprecated struct {
	// Field is its schema coordinate: Type.field for a field,
	// Type.field(argument:) for an argument.
	Field string `json:"field"`
	// Reason is the directive's reason ("No longer supported" when it gives
	// none, as the GraphQL specification says).
	Reason string `json:"reason"`
}

// deprecatedIn is what is deprecated about one field definition: the field
// itself (when field is not nil) and its arguments, by name.
type deprecatedIn struct {
	field *Deprecated
	args  map[string]*Deprecated
}

// deprecations maps the field definitions of a schema with something
// deprecated (the field or an argument) to what it is. The validator points
// every field of a document to its definition in the schema, so a field is
// looked up by that pointer, with no string built.
type deprecations map[*ast.FieldDefinition]deprecatedIn

// deprecationsOf reads the @deprecated directives of schema's fields and of
// their arguments (object and interface types; input fields and enum values
// are not counted).
func deprecationsOf(schema *ast.Schema) deprecations {
	out := deprecations{}
	for _, t := range schema.Types {
		if t.Kind != ast.Object && t.Kind != ast.Interface || strings.HasPrefix(t.Name, "__") {
			continue
		}
		for _, f := range t.Fields {
			var in deprecatedIn
			if reason, ok := deprecationReason(f.Directives); ok {
				in.field = &Deprecated{Field: t.Name + "." + f.Name, Reason: reason}
			}
			for _, a := range f.Arguments {
				if reason, ok := deprecationReason(a.Directives); ok {
					if in.args == nil {
						in.args = map[string]*Deprecated{}
					}
					in.args[a.Name] = &Deprecated{Field: t.Name + "." + f.Name + "(" + a.Name + ":)", Reason: reason}
				}
			}
			if in.field != nil || in.args != nil {
				out[f] = in
			}
		}
	}
	return out
}

// deprecationReason returns the reason of the @deprecated directive among ds,
// and whether there is one.
func deprecationReason(ds ast.DirectiveList) (string, bool) {
	d := ds.ForName("deprecated")
	if d == nil {
		return "", false
	}
	if a := d.Arguments.ForName("reason"); a != nil && a.Value != nil && a.Value.Kind == ast.StringValue {
		return a.Value.Raw, true
	}
	return "No longer supported", true
}

// all returns every deprecated field and argument, by Field.
func (ds deprecations) all() []Deprecated {
	var out []Deprecated
	for _, in := range ds {
		if in.field != nil {
			out = append(out, *in.field)
		}
		for _, a := range in.args {
			out = append(out, *a)
		}
	}
	slices.SortFunc(out, func(a, b Deprecated) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// deprecatedUses maps each operation of a validated document that selects a
// deprecated field or passes a deprecated argument, through its fragments
// too, to those, each once, by Field; it is nil when no operation does,
// which is what almost every document gets.
type deprecatedUses map[*ast.OperationDefinition][]Deprecated

// usesIn returns the deprecated uses of doc, a validated document. It walks
// each operation and each fragment definition it reaches once (a fragment's
// uses are kept for the next spread of it), and the uses collected are the
// schema's few deprecated elements at most, so its time is linear in the
// document's size; it is run once per document, before the
// document is cached.
func (ds deprecations) usesIn(doc *ast.QueryDocument) deprecatedUses {
	if len(ds) == 0 {
		return nil
	}
	u := usesWalk{ds: ds, doc: doc}
	var out deprecatedUses
	for _, op := range doc.Operations {
		found := u.selections(op.SelectionSet, nil)
		if len(found) == 0 {
			continue
		}
		list := make([]Deprecated, len(found))
		for i, d := range found {
			list[i] = *d
		}
		slices.SortFunc(list, func(a, b Deprecated) int { return strings.Compare(a.Field, b.Field) })
		if out == nil {
			out = deprecatedUses{}
		}
		out[op] = list
	}
	return out
}

// usesWalk is the state of one usesIn.
type usesWalk struct {
	ds        deprecations
	doc       *ast.QueryDocument
	fragments map[string][]*Deprecated // the uses of each fragment walked
}

// selections appends to found the uses in set, with the fragments it spreads.
func (u *usesWalk) selections(set ast.SelectionSet, found []*Deprecated) []*Deprecated {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if in, ok := u.ds[s.Definition]; ok {
				if in.field != nil {
					found = appendNew(found, in.field)
				}
				for _, a := range s.Arguments {
					if d := in.args[a.Name]; d != nil {
						found = appendNew(found, d)
					}
				}
			}
			found = u.selections(s.SelectionSet, found)
		case *ast.InlineFragment:
			found = u.selections(s.SelectionSet, found)
		case *ast.FragmentSpread:
			for _, d := range u.fragment(s.Name) {
				found = appendNew(found, d)
			}
		}
	}
	return found
}

// fragment returns the uses in the fragment definition name, walking it the
// first time. A validated document has no fragment cycles.
func (u *usesWalk) fragment(name string) []*Deprecated {
	if found, ok := u.fragments[name]; ok {
		return found
	}
	if u.fragments == nil {
		u.fragments = map[string][]*Deprecated{}
	}
	u.fragments[name] = nil // a cycle, were there one, ends here
	var found []*Deprecated
	if def := u.doc.Fragments.ForName(name); def != nil {
		found = u.selections(def.SelectionSet, nil)
	}
	u.fragments[name] = found
	return found
}

// appendNew appends d to found unless found has it. found holds each of the
// schema's few deprecated fields and arguments at most once, so however many
// times a document spreads its fragments the lists stay that short.
func appendNew(found []*Deprecated, d *Deprecated) []*Deprecated {
	if slices.Contains(found, d) {
		return found
	}
	return append(found, d)
}

// DeprecatedUses returns the deprecated fields and arguments that rc's
// operation uses (through its fragments too), each once, sorted by Field,
// or nil when it uses none or Extension did not validate it. It costs a
// lookup and allocates nothing: the uses were found when the document was
// validated, and kept with it in the Cache.
func DeprecatedUses(rc *graphql.OperationContext) []Deprecated {
	p := preparedOf(rc)
	if p == nil || p.uses == nil || rc.Operation == nil {
		return nil
	}
	return p.uses[rc.Operation]
}

// DeprecatedIn returns the deprecated fields and arguments that any
// operation of doc, a document Prepare validated, uses, each once, sorted by
// Field: what a document kept in the repository (an example, a playground
// tab) must not use.
func (v *Validator) DeprecatedIn(doc *ast.QueryDocument) []Deprecated {
	var out []Deprecated
	for _, uses := range v.deprecated.usesIn(doc) {
		out = append(out, uses...)
	}
	slices.SortFunc(out, func(a, b Deprecated) int { return strings.Compare(a.Field, b.Field) })
	return slices.CompactFunc(out, func(a, b Deprecated) bool { return a.Field == b.Field })
}
