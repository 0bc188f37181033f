package httpapi

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/errs"
)

// textFault names what makes s unfit to be stored as Postgres text: a NUL
// character (which no text or jsonb value can hold) or invalid UTF-8; "" when
// s is fine.
func textFault(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "a NUL character (\\u0000)"
	}
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	return ""
}

// inputGuard refuses, before anything runs or is charged, an operation with a
// string the database cannot store: it walks every string value of the
// document (arguments and variable defaults, in operations and fragments) and
// every string and object key of the coerced variables, once. A NUL or invalid
// UTF-8 anywhere is BAD_USER_INPUT naming the argument or variable, never the
// value. This is the one check where GraphQL input enters; store.InputError is
// the net under it.
//
// With types, it also refuses so a value that gqlgen's generated code would
// refuse only as its field runs, after the operation was charged and its
// other fields ran (inputTypes: an enum value in another case, a Time that
// is not RFC 3339, an Upload that is not a file part), in the variables or
// as a literal: BAD_USER_INPUT with the message the field would have
// answered.
type inputGuard struct {
	types *inputTypes
}

var (
	_ graphql.HandlerExtension        = inputGuard{}
	_ graphql.OperationContextMutator = inputGuard{}
)

// ExtensionName names the extension.
func (inputGuard) ExtensionName() string { return "InputGuard" }

// Validate accepts any schema.
func (inputGuard) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext checks the document's strings and literals, then
// the variables' strings, then their values.
func (g inputGuard) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Doc != nil {
		if err := checkDocument(oc.Doc, g.types); err != nil {
			return err
		}
	}
	if path, fault := valueFault(oc.Variables); fault != "" {
		return inputRefusal("variable $"+strings.TrimPrefix(path, ".")+" contains "+fault, nil)
	}
	return g.types.variables(oc.Operation, oc.Variables)
}

// inputRefusal is the BAD_USER_INPUT error of a string the database cannot store.
func inputRefusal(msg string, pos *ast.Position) *gqlerror.Error {
	err := &gqlerror.Error{Message: msg + "; nothing was run",
		Extensions: map[string]any{"code": string(errs.CodeBadUserInput)}}
	if pos != nil {
		err.Locations = []gqlerror.Location{{Line: pos.Line, Column: pos.Column}}
	}
	return err
}

// checkDocument checks every string literal of the document, and every
// literal of a type types checks.
func checkDocument(doc *ast.QueryDocument, types *inputTypes) *gqlerror.Error {
	for _, op := range doc.Operations {
		for _, v := range op.VariableDefinitions {
			if path, bad, fault := literalFault(v.DefaultValue); fault != "" {
				return inputRefusal("the default of $"+v.Variable+path+" contains "+fault, bad.Position)
			}
		}
		if err := checkDirectives(op.Directives, types); err != nil {
			return err
		}
		if err := checkSelections(op.SelectionSet, types); err != nil {
			return err
		}
	}
	for _, f := range doc.Fragments {
		if err := checkDirectives(f.Directives, types); err != nil {
			return err
		}
		if err := checkSelections(f.SelectionSet, types); err != nil {
			return err
		}
	}
	return nil
}

// checkSelections checks the arguments of the fields and directives of a
// selection set and of the sets under it (fragment spreads are checked where
// the fragment is defined).
func checkSelections(set ast.SelectionSet, types *inputTypes) *gqlerror.Error {
	for _, sel := range set {
		var err *gqlerror.Error
		switch s := sel.(type) {
		case *ast.Field:
			if err = checkArguments(s.Arguments, s.Name, types); err == nil {
				if err = checkDirectives(s.Directives, types); err == nil {
					err = checkSelections(s.SelectionSet, types)
				}
			}
		case *ast.InlineFragment:
			if err = checkDirectives(s.Directives, types); err == nil {
				err = checkSelections(s.SelectionSet, types)
			}
		case *ast.FragmentSpread:
			err = checkDirectives(s.Directives, types)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkDirectives checks the arguments of directives.
func checkDirectives(list ast.DirectiveList, types *inputTypes) *gqlerror.Error {
	for _, d := range list {
		if err := checkArguments(d.Arguments, "@"+d.Name, types); err != nil {
			return err
		}
	}
	return nil
}

// checkArguments checks the literal of each argument of the field or
// directive named of: its strings, then its values of a type types checks.
func checkArguments(args ast.ArgumentList, of string, types *inputTypes) *gqlerror.Error {
	for _, a := range args {
		if path, bad, fault := literalFault(a.Value); fault != "" {
			return inputRefusal("argument "+a.Name+path+" of "+of+" contains "+fault, bad.Position)
		}
		if err := types.literal(a.Value); err != nil {
			return err
		}
	}
	return nil
}

// literalFault finds the first string of a literal value (its list items and
// object fields included) that the database cannot store, and returns its
// path below v (as .title or [1]; field names are GraphQL names, nothing
// else lexes), the string's value and what is wrong with it; fault is ""
// when every string is fine. Nothing is allocated unless one is found.
func literalFault(v *ast.Value) (path string, bad *ast.Value, fault string) {
	if v == nil {
		return "", nil, ""
	}
	switch v.Kind {
	case ast.StringValue, ast.BlockValue:
		return "", v, textFault(v.Raw)
	case ast.ListValue, ast.ObjectValue:
		for i, c := range v.Children {
			if p, b, f := literalFault(c.Value); f != "" {
				if v.Kind == ast.ListValue {
					return "[" + strconv.Itoa(i) + "]" + p, b, f
				}
				return "." + c.Name + p, b, f
			}
		}
	}
	return "", nil, ""
}

// valueFault finds the first string or object key of a decoded JSON value (a
// variable) that the database cannot store, and returns its path below v (as
// .title or [2]) and what is wrong with it; fault is "" when every string is
// fine. Object keys are visited in order, so the same one is named every time.
func valueFault(v any) (path, fault string) {
	switch v := v.(type) {
	case string:
		return "", textFault(v)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if fault := textFault(k); fault != "" {
				return "", "a field name with " + fault
			}
			if p, fault := valueFault(v[k]); fault != "" {
				return "." + k + p, fault
			}
		}
	case []any:
		for i, e := range v {
			if p, fault := valueFault(e); fault != "" {
				return "[" + strconv.Itoa(i) + "]" + p, fault
			}
		}
	}
	return "", ""
}

// queryParamsFault returns an error naming the first query parameter (name or
// value) of q that the database could not store, or nil.
func queryParamsFault(q url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if fault := textFault(name); fault != "" {
			return errs.Errorf(errs.CodeBadUserInput, "a query parameter name contains %s", fault)
		}
		for _, v := range q[name] {
			if fault := textFault(v); fault != "" {
				return errs.Errorf(errs.CodeBadUserInput, "query parameter %s contains %s", strconv.Quote(name), fault)
			}
		}
	}
	return nil
}
