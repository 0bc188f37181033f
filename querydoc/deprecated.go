package querydoc

import (
	"reflect"
	"slices"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// Deprecated is a member of the schema marked @deprecated: a field, an
// argument of a field, an input field or an enum value.
type Deprecated struct {
	// Field is its schema coordinate: Type.field for a field,
	// Type.field(argument:) for an argument, Input.field for a field of an
	// input type, Enum.VALUE for an enum value. One coordinate names one
	// member of the schema wherever a document passes it, so their number
	// is the schema's deprecated members.
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

// deprecations is what a schema marks @deprecated. The validator points
// every field of a document to its definition in the schema, and every
// value to its type's, so each member is looked up by its definition's
// pointer, with no string built.
type deprecations struct {
	schema *ast.Schema
	// fields are the fields of object and interface types with something
	// deprecated (the field or an argument).
	fields map[*ast.FieldDefinition]deprecatedIn
	// inputs are the deprecated fields of input types.
	inputs map[*ast.FieldDefinition]*Deprecated
	// values are the deprecated enum values.
	values map[*ast.EnumValueDefinition]*Deprecated
	// carriers are the input types and enums a value of which can hold a
	// deprecated input field or enum value: an enum with a deprecated
	// value, an input type with a deprecated field or a field of a carrier
	// type (a list of one too). Only values of these types are read.
	carriers map[*ast.Definition]bool
}

// deprecationsOf reads the @deprecated directives of schema's fields and
// their arguments (object and interface types), input fields and enum
// values.
func deprecationsOf(schema *ast.Schema) *deprecations {
	ds := &deprecations{schema: schema, fields: map[*ast.FieldDefinition]deprecatedIn{},
		inputs: map[*ast.FieldDefinition]*Deprecated{}, values: map[*ast.EnumValueDefinition]*Deprecated{},
		carriers: map[*ast.Definition]bool{}}
	for _, t := range schema.Types {
		if strings.HasPrefix(t.Name, "__") {
			continue
		}
		switch t.Kind {
		case ast.Object, ast.Interface:
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
					ds.fields[f] = in
				}
			}
		case ast.InputObject:
			for _, f := range t.Fields {
				if reason, ok := deprecationReason(f.Directives); ok {
					ds.inputs[f] = &Deprecated{Field: t.Name + "." + f.Name, Reason: reason}
					ds.carriers[t] = true
				}
			}
		case ast.Enum:
			for _, v := range t.EnumValues {
				if reason, ok := deprecationReason(v.Directives); ok {
					ds.values[v] = &Deprecated{Field: t.Name + "." + v.Name, Reason: reason}
					ds.carriers[t] = true
				}
			}
		}
	}
	// An input type with a field of a carrier type is one too, to a fixed
	// point: input types may refer to each other in a cycle.
	for grown := len(ds.carriers) > 0; grown; {
		grown = false
		for _, t := range schema.Types {
			if t.Kind != ast.InputObject || ds.carriers[t] {
				continue
			}
			for _, f := range t.Fields {
				if ds.carriers[schema.Types[f.Type.Name()]] {
					ds.carriers[t], grown = true, true
					break
				}
			}
		}
	}
	return ds
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

// all returns every deprecated member, by Field.
func (ds *deprecations) all() []Deprecated {
	var out []Deprecated
	for _, in := range ds.fields {
		if in.field != nil {
			out = append(out, *in.field)
		}
		for _, a := range in.args {
			out = append(out, *a)
		}
	}
	for _, d := range ds.inputs {
		out = append(out, *d)
	}
	for _, d := range ds.values {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Deprecated) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// deprecatedUses is what the operations of a validated document use that is
// deprecated, or may use through their variables; a document has none
// (nil), which is what almost every document gets, unless one of its
// operations selects a deprecated field, passes a deprecated argument, writes
// a deprecated input field or enum value, or has a variable of a carrier
// type.
type deprecatedUses struct {
	ds  *deprecations
	ops map[*ast.OperationDefinition]*opUses
}

// opUses is what one operation uses that is deprecated: what its document
// writes (through its fragments too), each once, by Field; and its
// variables whose values may carry a deprecated input field or enum value,
// read for each request.
type opUses struct {
	static []Deprecated
	vars   []*ast.VariableDefinition
}

// usesIn returns the deprecated uses of doc, a validated document, or nil.
// It walks each operation and each fragment definition it reaches once (a
// fragment's uses are kept for the next spread of it), and the uses
// collected are the schema's few deprecated members at most, so its time is
// linear in the document's size; it is run once per document, before the
// document is cached.
func (ds *deprecations) usesIn(doc *ast.QueryDocument) *deprecatedUses {
	if len(ds.fields) == 0 && len(ds.carriers) == 0 {
		return nil
	}
	u := usesWalk{ds: ds, doc: doc}
	var out *deprecatedUses
	for _, op := range doc.Operations {
		found := u.selections(op.SelectionSet, nil)
		var vars []*ast.VariableDefinition
		for _, v := range op.VariableDefinitions {
			if ds.carriers[v.Definition] {
				vars = append(vars, v)
			}
		}
		if len(found) == 0 && len(vars) == 0 {
			continue
		}
		if out == nil {
			out = &deprecatedUses{ds: ds, ops: map[*ast.OperationDefinition]*opUses{}}
		}
		out.ops[op] = &opUses{static: sorted(found, nil), vars: vars}
	}
	return out
}

// sorted returns the Deprecated of found and of more not in found, sorted
// by Field; nil when there is none.
func sorted(found []*Deprecated, more []Deprecated) []Deprecated {
	if len(found)+len(more) == 0 {
		return nil
	}
	list := slices.Clone(more)
	for _, d := range found {
		if !slices.ContainsFunc(more, func(m Deprecated) bool { return m.Field == d.Field }) {
			list = append(list, *d)
		}
	}
	slices.SortFunc(list, func(a, b Deprecated) int { return strings.Compare(a.Field, b.Field) })
	return list
}

// usesWalk is the state of one usesIn.
type usesWalk struct {
	ds        *deprecations
	doc       *ast.QueryDocument
	fragments map[string][]*Deprecated // the uses of each fragment walked
}

// selections appends to found the uses in set, with the fragments it spreads.
func (u *usesWalk) selections(set ast.SelectionSet, found []*Deprecated) []*Deprecated {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if in, ok := u.ds.fields[s.Definition]; ok {
				if in.field != nil {
					found = appendNew(found, in.field)
				}
				for _, a := range s.Arguments {
					if d := in.args[a.Name]; d != nil {
						found = appendNew(found, d)
					}
				}
			}
			if len(u.ds.carriers) > 0 {
				for _, a := range s.Arguments {
					found = u.ds.inLiteral(a.Value, found)
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

// inLiteral appends to found the deprecated input fields and enum values
// written in v, an argument's value as the validator typed it (a variable in
// it is read per request, from the variable's definition).
func (ds *deprecations) inLiteral(v *ast.Value, found []*Deprecated) []*Deprecated {
	if v == nil || !ds.carriers[v.Definition] {
		return found
	}
	switch v.Kind {
	case ast.EnumValue:
		if d := ds.values[v.Definition.EnumValues.ForName(v.Raw)]; d != nil {
			found = appendNew(found, d)
		}
	case ast.ListValue:
		for _, c := range v.Children {
			found = ds.inLiteral(c.Value, found)
		}
	case ast.ObjectValue:
		for _, c := range v.Children {
			if d := ds.inputs[v.Definition.Fields.ForName(c.Name)]; d != nil {
				found = appendNew(found, d)
			}
			found = ds.inLiteral(c.Value, found)
		}
	}
	return found
}

// inValue appends to found the deprecated input fields and enum values in v,
// the coerced value of a variable of type t (JSON's: maps, lists, strings).
// A value given for a list is a list of one, as GraphQL coerces it. It
// allocates nothing unless it finds one.
func (ds *deprecations) inValue(v any, t *ast.Type, found []*Deprecated) []*Deprecated {
	if v == nil {
		return found
	}
	if t.Elem != nil {
		switch list := v.(type) {
		case []any:
			for _, e := range list {
				found = ds.inValue(e, t.Elem, found)
			}
		default:
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice { // the coercion's list of one
				for i := range rv.Len() {
					found = ds.inValue(rv.Index(i).Interface(), t.Elem, found)
				}
			} else {
				found = ds.inValue(v, t.Elem, found)
			}
		}
		return found
	}
	def := ds.schema.Types[t.NamedType]
	if !ds.carriers[def] {
		return found
	}
	switch def.Kind {
	case ast.Enum:
		if s, ok := v.(string); ok {
			if d := ds.values[def.EnumValues.ForName(s)]; d != nil {
				found = appendNew(found, d)
			}
		}
	case ast.InputObject:
		if m, ok := v.(map[string]any); ok {
			for name, fv := range m {
				f := def.Fields.ForName(name)
				if f == nil {
					continue
				}
				if d := ds.inputs[f]; d != nil {
					found = appendNew(found, d)
				}
				found = ds.inValue(fv, f.Type, found)
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
// schema's few deprecated members at most once, so however many times a
// document spreads its fragments the lists stay that short.
func appendNew(found []*Deprecated, d *Deprecated) []*Deprecated {
	if slices.Contains(found, d) {
		return found
	}
	return append(found, d)
}

// variableUsesKey is where DeprecatedUses keeps, in an operation's stats,
// its uses with those its variables add.
const variableUsesKey = "taskflow.querydoc.deprecated"

// DeprecatedUses returns the deprecated members that rc's operation uses,
// each once, sorted by Field: the fields it selects and arguments it passes
// (through its fragments too), and the input fields and enum values it
// passes, written in the document or in its variables' values (sent, or a
// variable's default). It is nil when it uses none, when Extension did not
// validate its document, and until gqlgen has coerced its variables
// (rc.Variables, set only when they coerce: an operation context mutator
// sees them): before, what they carry is not known, and an operation whose
// variables do not coerce is refused as invalid.
//
// For an operation that has no variable of a type that can carry a
// deprecated input field or enum value (every operation, while the schema
// deprecates none) it costs a lookup and allocates nothing: the uses were
// found when the document was validated, and kept with it in the Cache.
// Otherwise the variables are read at each call, allocating nothing unless
// they carry a deprecated member, and what they add is kept in rc's stats
// at the first call; gqlgen makes that call (its operation context
// mutators run before its response interceptors) before any other for the
// operation.
func DeprecatedUses(rc *graphql.OperationContext) []Deprecated {
	p := preparedOf(rc)
	if p == nil || p.uses == nil || rc.Operation == nil || rc.Variables == nil {
		return nil
	}
	u := p.uses.ops[rc.Operation]
	if u == nil {
		return nil
	}
	if len(u.vars) == 0 {
		return u.static
	}
	if kept, ok := rc.Stats.GetExtension(variableUsesKey).([]Deprecated); ok {
		return kept
	}
	var found []*Deprecated
	for _, v := range u.vars {
		if value, ok := rc.Variables[v.Variable]; ok {
			found = p.uses.ds.inValue(value, v.Type, found)
		}
	}
	if len(found) == 0 {
		return u.static
	}
	all := sorted(found, u.static)
	rc.Stats.SetExtension(variableUsesKey, all)
	return all
}

// DeprecatedIn returns the deprecated members that any operation of doc, a
// document Prepare validated, writes, each once, sorted by Field: what a
// document kept in the repository (an example, a playground tab) must not
// use. What variables would carry is not known without them.
func (v *Validator) DeprecatedIn(doc *ast.QueryDocument) []Deprecated {
	u := v.deprecated.usesIn(doc)
	if u == nil {
		return nil
	}
	var out []Deprecated
	for _, op := range u.ops {
		out = append(out, op.static...)
	}
	slices.SortFunc(out, func(a, b Deprecated) int { return strings.Compare(a.Field, b.Field) })
	return slices.CompactFunc(out, func(a, b Deprecated) bool { return a.Field == b.Field })
}
