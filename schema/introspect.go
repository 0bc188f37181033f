package schema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// The types below are the standard introspection result (what the
// introspection query of graphql-js returns under data), so tools such as
// graphql-js's buildClientSchema read public.json as it is.

// Introspection is the top of an introspection result: {"__schema": ...}.
type Introspection struct {
	Schema IntroSchema `json:"__schema"`
}

// IntroSchema is __Schema.
type IntroSchema struct {
	Description      *string          `json:"description"`
	QueryType        *IntroName       `json:"queryType"`
	MutationType     *IntroName       `json:"mutationType"`
	SubscriptionType *IntroName       `json:"subscriptionType"`
	Types            []IntroType      `json:"types"`
	Directives       []IntroDirective `json:"directives"`
}

// IntroName is a reference to a named type.
type IntroName struct {
	Name string `json:"name"`
}

// IntroType is __Type for a named type.
type IntroType struct {
	Kind           string            `json:"kind"`
	Name           string            `json:"name"`
	Description    *string           `json:"description"`
	SpecifiedByURL *string           `json:"specifiedByURL"`
	Fields         []IntroField      `json:"fields"`
	InputFields    []IntroInputValue `json:"inputFields"`
	Interfaces     []IntroTypeRef    `json:"interfaces"`
	EnumValues     []IntroEnumValue  `json:"enumValues"`
	PossibleTypes  []IntroTypeRef    `json:"possibleTypes"`
}

// IntroField is __Field.
type IntroField struct {
	Name              string            `json:"name"`
	Description       *string           `json:"description"`
	Args              []IntroInputValue `json:"args"`
	Type              IntroTypeRef      `json:"type"`
	IsDeprecated      bool              `json:"isDeprecated"`
	DeprecationReason *string           `json:"deprecationReason"`
}

// IntroInputValue is __InputValue: an argument or an input field.
type IntroInputValue struct {
	Name              string       `json:"name"`
	Description       *string      `json:"description"`
	Type              IntroTypeRef `json:"type"`
	DefaultValue      *string      `json:"defaultValue"`
	IsDeprecated      bool         `json:"isDeprecated"`
	DeprecationReason *string      `json:"deprecationReason"`
}

// IntroEnumValue is __EnumValue.
type IntroEnumValue struct {
	Name              string  `json:"name"`
	Description       *string `json:"description"`
	IsDeprecated      bool    `json:"isDeprecated"`
	DeprecationReason *string `json:"deprecationReason"`
}

// IntroTypeRef is a type reference: a named type, or a LIST or NON_NULL
// wrapper of one (ofType).
type IntroTypeRef struct {
	Kind   string        `json:"kind"`
	Name   *string       `json:"name"`
	OfType *IntroTypeRef `json:"ofType"`
}

// IntroDirective is __Directive.
type IntroDirective struct {
	Name         string            `json:"name"`
	Description  *string           `json:"description"`
	IsRepeatable bool              `json:"isRepeatable"`
	Locations    []string          `json:"locations"`
	Args         []IntroInputValue `json:"args"`
}

// Introspect renders s as its introspection result, indented JSON ending in a
// newline. Types and directives are sorted by name, fields, arguments and
// values keep their schema order, so the output only changes when the schema
// does.
func Introspect(s *ast.Schema) ([]byte, error) {
	var in Introspection
	if s.Query != nil {
		in.Schema.QueryType = &IntroName{s.Query.Name}
	}
	if s.Mutation != nil {
		in.Schema.MutationType = &IntroName{s.Mutation.Name}
	}
	if s.Subscription != nil {
		in.Schema.SubscriptionType = &IntroName{s.Subscription.Name}
	}
	if s.Description != "" {
		in.Schema.Description = &s.Description
	}
	names := make([]string, 0, len(s.Types))
	for n := range s.Types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		in.Schema.Types = append(in.Schema.Types, introType(s, s.Types[n]))
	}
	dnames := make([]string, 0, len(s.Directives))
	for n := range s.Directives {
		dnames = append(dnames, n)
	}
	sort.Strings(dnames)
	for _, n := range dnames {
		d := s.Directives[n]
		id := IntroDirective{Name: d.Name, Description: optional(d.Description), IsRepeatable: d.IsRepeatable,
			Locations: []string{}, Args: []IntroInputValue{}}
		for _, l := range d.Locations {
			id.Locations = append(id.Locations, string(l))
		}
		for _, a := range d.Arguments {
			id.Args = append(id.Args, introInput(s, a.Name, a.Description, a.Type, a.DefaultValue, a.Directives))
		}
		in.Schema.Directives = append(in.Schema.Directives, id)
	}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func introType(s *ast.Schema, d *ast.Definition) IntroType {
	t := IntroType{Kind: string(d.Kind), Name: d.Name, Description: optional(d.Description)}
	if sb := d.Directives.ForName("specifiedBy"); sb != nil {
		if u := sb.Arguments.ForName("url"); u != nil && u.Value != nil {
			t.SpecifiedByURL = &u.Value.Raw
		}
	}
	switch d.Kind {
	case ast.Object, ast.Interface:
		t.Fields = []IntroField{}
		for _, f := range d.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			reason, dep := deprecation(f.Directives)
			fld := IntroField{Name: f.Name, Description: optional(f.Description), Type: typeRef(s, f.Type),
				Args: []IntroInputValue{}, IsDeprecated: dep, DeprecationReason: reason}
			for _, a := range f.Arguments {
				fld.Args = append(fld.Args, introInput(s, a.Name, a.Description, a.Type, a.DefaultValue, a.Directives))
			}
			t.Fields = append(t.Fields, fld)
		}
		t.Interfaces = []IntroTypeRef{}
		for _, i := range d.Interfaces {
			t.Interfaces = append(t.Interfaces, named(s, i))
		}
		if d.Kind == ast.Interface {
			t.PossibleTypes = possible(s, d)
		}
	case ast.Union:
		t.PossibleTypes = possible(s, d)
	case ast.Enum:
		t.EnumValues = []IntroEnumValue{}
		for _, v := range d.EnumValues {
			reason, dep := deprecation(v.Directives)
			t.EnumValues = append(t.EnumValues, IntroEnumValue{Name: v.Name, Description: optional(v.Description),
				IsDeprecated: dep, DeprecationReason: reason})
		}
	case ast.InputObject:
		t.InputFields = []IntroInputValue{}
		for _, f := range d.Fields {
			t.InputFields = append(t.InputFields, introInput(s, f.Name, f.Description, f.Type, f.DefaultValue, f.Directives))
		}
	}
	return t
}

func possible(s *ast.Schema, d *ast.Definition) []IntroTypeRef {
	var names []string
	for _, p := range s.GetPossibleTypes(d) {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	refs := []IntroTypeRef{}
	for _, n := range names {
		refs = append(refs, named(s, n))
	}
	return refs
}

func introInput(s *ast.Schema, name, desc string, t *ast.Type, def *ast.Value, dirs ast.DirectiveList) IntroInputValue {
	reason, dep := deprecation(dirs)
	iv := IntroInputValue{Name: name, Description: optional(desc), Type: typeRef(s, t),
		IsDeprecated: dep, DeprecationReason: reason}
	if def != nil {
		dv := def.String()
		iv.DefaultValue = &dv
	}
	return iv
}

func deprecation(dirs ast.DirectiveList) (*string, bool) {
	d := dirs.ForName("deprecated")
	if d == nil {
		return nil, false
	}
	reason := "No longer supported"
	if a := d.Arguments.ForName("reason"); a != nil && a.Value != nil {
		reason = a.Value.Raw
	}
	return &reason, true
}

func named(s *ast.Schema, name string) IntroTypeRef {
	kind := "OBJECT"
	if s != nil && s.Types[name] != nil {
		kind = string(s.Types[name].Kind)
	}
	return IntroTypeRef{Kind: kind, Name: &name}
}

func typeRef(s *ast.Schema, t *ast.Type) IntroTypeRef {
	var r IntroTypeRef
	if t.Elem != nil {
		inner := typeRef(s, t.Elem)
		r = IntroTypeRef{Kind: "LIST", OfType: &inner}
	} else {
		r = named(s, t.NamedType)
	}
	if t.NonNull {
		inner := r
		return IntroTypeRef{Kind: "NON_NULL", OfType: &inner}
	}
	return r
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// FromIntrospection loads an introspection result (as Introspect writes it)
// back into a schema, through SDL and gqlparser, so it can be compared with
// the schema files. Descriptions are left out; the built-in types and
// directives come from gqlparser. It returns an error if data is not an
// introspection result of a valid schema.
func FromIntrospection(data []byte) (*ast.Schema, error) {
	var in Introspection
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("introspection result: %w", err)
	}
	sdl, err := in.SDL()
	if err != nil {
		return nil, err
	}
	s, gerr := gqlparser.LoadSchema(&ast.Source{Name: "introspection", Input: sdl})
	if gerr != nil {
		return nil, fmt.Errorf("introspection result is not a valid schema: %w", gerr)
	}
	return s, nil
}

// SDL prints the schema of the introspection result as GraphQL SDL, without
// descriptions and without the built-in types and directives. It returns an
// error for a type kind or type reference it does not know.
func (in Introspection) SDL() (string, error) {
	var b strings.Builder
	b.WriteString("schema {\n")
	for _, root := range []struct {
		op string
		t  *IntroName
	}{{"query", in.Schema.QueryType}, {"mutation", in.Schema.MutationType}, {"subscription", in.Schema.SubscriptionType}} {
		if root.t != nil {
			fmt.Fprintf(&b, "  %s: %s\n", root.op, root.t.Name)
		}
	}
	b.WriteString("}\n")
	for _, d := range in.Schema.Directives {
		if builtinDirective(d.Name) {
			continue
		}
		fmt.Fprintf(&b, "directive @%s", d.Name)
		if err := writeArgs(&b, d.Args); err != nil {
			return "", err
		}
		if d.IsRepeatable {
			b.WriteString(" repeatable")
		}
		fmt.Fprintf(&b, " on %s\n", strings.Join(d.Locations, " | "))
	}
	for _, t := range in.Schema.Types {
		if builtinType(t.Name) {
			continue
		}
		switch t.Kind {
		case "SCALAR":
			fmt.Fprintf(&b, "scalar %s", t.Name)
			if t.SpecifiedByURL != nil {
				fmt.Fprintf(&b, " @specifiedBy(url: %s)", quote(*t.SpecifiedByURL))
			}
			b.WriteString("\n")
		case "OBJECT", "INTERFACE":
			kw := map[string]string{"OBJECT": "type", "INTERFACE": "interface"}[t.Kind]
			fmt.Fprintf(&b, "%s %s", kw, t.Name)
			for i, it := range t.Interfaces {
				sep := " & "
				if i == 0 {
					sep = " implements "
				}
				if it.Name == nil {
					return "", fmt.Errorf("type %s implements an unnamed type", t.Name)
				}
				b.WriteString(sep + *it.Name)
			}
			b.WriteString(" {\n")
			for _, f := range t.Fields {
				b.WriteString("  " + f.Name)
				if err := writeArgs(&b, f.Args); err != nil {
					return "", err
				}
				ts, err := f.Type.sdl()
				if err != nil {
					return "", fmt.Errorf("%s.%s: %w", t.Name, f.Name, err)
				}
				b.WriteString(": " + ts + deprecated(f.IsDeprecated, f.DeprecationReason) + "\n")
			}
			b.WriteString("}\n")
		case "UNION":
			var members []string
			for _, p := range t.PossibleTypes {
				if p.Name == nil {
					return "", fmt.Errorf("union %s has an unnamed member", t.Name)
				}
				members = append(members, *p.Name)
			}
			fmt.Fprintf(&b, "union %s = %s\n", t.Name, strings.Join(members, " | "))
		case "ENUM":
			fmt.Fprintf(&b, "enum %s {\n", t.Name)
			for _, v := range t.EnumValues {
				b.WriteString("  " + v.Name + deprecated(v.IsDeprecated, v.DeprecationReason) + "\n")
			}
			b.WriteString("}\n")
		case "INPUT_OBJECT":
			fmt.Fprintf(&b, "input %s {\n", t.Name)
			for _, f := range t.InputFields {
				s, err := inputValue(f)
				if err != nil {
					return "", fmt.Errorf("%s.%s: %w", t.Name, f.Name, err)
				}
				b.WriteString("  " + s + "\n")
			}
			b.WriteString("}\n")
		default:
			return "", fmt.Errorf("type %s has unknown kind %q", t.Name, t.Kind)
		}
	}
	return b.String(), nil
}

func writeArgs(b *strings.Builder, args []IntroInputValue) error {
	if len(args) == 0 {
		return nil
	}
	parts := make([]string, 0, len(args))
	for _, a := range args {
		s, err := inputValue(a)
		if err != nil {
			return fmt.Errorf("argument %s: %w", a.Name, err)
		}
		parts = append(parts, s)
	}
	b.WriteString("(" + strings.Join(parts, ", ") + ")")
	return nil
}

func inputValue(v IntroInputValue) (string, error) {
	ts, err := v.Type.sdl()
	if err != nil {
		return "", err
	}
	s := v.Name + ": " + ts
	if v.DefaultValue != nil {
		s += " = " + *v.DefaultValue
	}
	return s + deprecated(v.IsDeprecated, v.DeprecationReason), nil
}

func deprecated(dep bool, reason *string) string {
	if !dep {
		return ""
	}
	if reason == nil {
		return " @deprecated"
	}
	return " @deprecated(reason: " + quote(*reason) + ")"
}

// quote writes s as a GraphQL string literal (JSON's escapes are GraphQL's).
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (r IntroTypeRef) sdl() (string, error) {
	switch r.Kind {
	case "NON_NULL", "LIST":
		if r.OfType == nil {
			return "", fmt.Errorf("%s without ofType", r.Kind)
		}
		inner, err := r.OfType.sdl()
		if err != nil {
			return "", err
		}
		if r.Kind == "LIST" {
			return "[" + inner + "]", nil
		}
		return inner + "!", nil
	default:
		if r.Name == nil {
			return "", fmt.Errorf("type reference of kind %s without a name", r.Kind)
		}
		return *r.Name, nil
	}
}
