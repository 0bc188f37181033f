package httpapi

import (
	"errors"
	"reflect"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/errs"
	"taskflow/store"
)

// unmarshalers are the checks gqlgen's generated code makes of a value of
// each enum and custom scalar that input can carry, as the field that takes
// it runs: the same functions (the models of gqlgen.yml), called on the same
// value, so that the refusal says what the field would have said.
// gqlparser's coercion of variables lets through what these refuse: an enum
// value in another case ("todo" for TODO), anything for a custom scalar; and
// its validation of a document lets through any literal of a custom scalar.
// TestInputCheckedTypesCoverTheSchema fails when an enum or custom scalar
// that input can carry is missing here.
var unmarshalers = map[string]func(any) error{
	"Role":                  enum[store.Role],
	"TaskStatus":            enum[store.TaskStatus],
	"TaskPriority":          enum[store.TaskPriority],
	"AuditExportState":      enum[store.AuditExportState],
	"AuditExportFormat":     enum[store.AuditExportFormat],
	"WebhookDeliveryStatus": enum[store.WebhookDeliveryStatus],
	"Time":                  func(v any) error { _, err := graphql.UnmarshalTime(v); return err },
	"Upload":                func(v any) error { var x store.Upload; return x.UnmarshalGQL(v) },
}

// enum is the check of an enum of package store: a valid value is taken
// without a call that would allocate, any other is refused by the type's
// own UnmarshalGQL, with its message.
func enum[T interface {
	~string
	IsValid() bool
}, P interface {
	*T
	UnmarshalGQL(any) error
}](v any) error {
	if s, ok := v.(string); ok && T(s).IsValid() {
		return nil
	}
	var x T
	return P(&x).UnmarshalGQL(v)
}

// inputTypes finds, before anything runs or is charged, a value of the
// operation's variables or document that gqlgen's generated code would
// refuse as its field runs (unmarshalers). It knows, for each input type of
// the schema, whether its values can hold such a value at all, so that an
// operation without one (most: ids, strings, numbers) is not walked.
type inputTypes struct {
	schema *ast.Schema
	// checked holds the enums and custom scalars of unmarshalers, and the
	// input objects whose fields (at any depth) are of one of them.
	checked map[string]bool
}

// newInputTypes finds the checked types of s. A nil *inputTypes checks
// nothing.
func newInputTypes(s *ast.Schema) *inputTypes {
	t := &inputTypes{schema: s, checked: map[string]bool{}}
	for name := range unmarshalers {
		if s.Types[name] != nil {
			t.checked[name] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for name, def := range s.Types {
			if def.Kind != ast.InputObject || t.checked[name] {
				continue
			}
			for _, f := range def.Fields {
				if t.checked[f.Type.Name()] {
					t.checked[name], changed = true, true
					break
				}
			}
		}
	}
	return t
}

// variables returns the refusal of the first variable of op whose value in
// vars gqlgen's generated code would refuse (variables in the order they are
// declared, the fields of an input object in the schema's order, the order
// gqlgen reads them in), or nil. It allocates nothing when every value is
// fine.
func (t *inputTypes) variables(op *ast.OperationDefinition, vars map[string]any) *gqlerror.Error {
	if t == nil || op == nil {
		return nil
	}
	for _, d := range op.VariableDefinitions {
		if !t.checked[d.Type.Name()] {
			continue
		}
		if err := t.value(vars[d.Variable], d.Type); err != nil {
			return unmarshalRefusal(err, d.Position)
		}
	}
	return nil
}

// value checks v, a coerced variable's value (or a part of it) of type typ.
func (t *inputTypes) value(v any, typ *ast.Type) error {
	if v == nil {
		return nil // gqlgen unmarshals no null; gqlparser refused a null where it may not be
	}
	if typ.Elem != nil {
		switch l := v.(type) {
		case []any:
			for _, e := range l {
				if err := t.value(e, typ.Elem); err != nil {
					return err
				}
			}
			return nil
		}
		// gqlparser coerces a single value into a typed slice of it
		// ([]string); gqlgen reads a lone value as a list of one.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice {
			for i := range rv.Len() {
				if err := t.value(rv.Index(i).Interface(), typ.Elem); err != nil {
					return err
				}
			}
			return nil
		}
		return t.value(v, typ.Elem)
	}
	if u := unmarshalers[typ.NamedType]; u != nil {
		return u(v)
	}
	def := t.schema.Types[typ.NamedType]
	m, ok := v.(map[string]any)
	if def == nil || def.Kind != ast.InputObject || !ok {
		return nil
	}
	for _, f := range def.Fields {
		if !t.checked[f.Type.Name()] {
			continue
		}
		if err := t.value(m[f.Name], f.Type); err != nil {
			return err
		}
	}
	return nil
}

// literal returns the refusal of the first value of the literal v (its list
// items and object fields included; variables are checked by variables)
// that gqlgen's generated code would refuse, or nil: a literal of a custom
// scalar, which validation takes whatever it is (dueDate: "tomorrow", file:
// "a.txt").
func (t *inputTypes) literal(v *ast.Value) *gqlerror.Error {
	if t == nil || v == nil || v.Kind == ast.Variable || v.Definition == nil || !t.checked[v.Definition.Name] {
		return nil
	}
	switch v.Kind {
	case ast.ListValue, ast.ObjectValue:
		for _, c := range v.Children {
			if err := t.literal(c.Value); err != nil {
				return err
			}
		}
		return nil
	}
	u := unmarshalers[v.Definition.Name]
	if u == nil {
		return nil
	}
	val, err := v.Value(nil)
	if err != nil || val == nil {
		return nil // validation's to refuse
	}
	if err := u(val); err != nil {
		return unmarshalRefusal(err, v.Position)
	}
	return nil
}

// unmarshalRefusal is the error of a value refused by unmarshalers: its
// message, and its code (BAD_USER_INPUT unless it is a domain error with a
// code of its own), as the field would have answered it, at pos.
func unmarshalRefusal(err error, pos *ast.Position) *gqlerror.Error {
	code := errs.CodeBadUserInput
	var e *errs.Error
	if errors.As(err, &e) && e.Code != "" {
		code = e.Code
	}
	out := &gqlerror.Error{Message: err.Error(), Extensions: map[string]any{"code": string(code)}}
	if pos != nil {
		out.Locations = []gqlerror.Location{{Line: pos.Line, Column: pos.Column}}
	}
	return out
}
