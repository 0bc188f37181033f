package apq

import "github.com/vektah/gqlparser/v2/ast"

// SecretDirective names the schema directive (@secret) that marks an argument
// or an input field as carrying a secret, such as login's password. A text
// that writes such a value inline is run but never stored under its hash: the
// hash travels where secrets should not (URLs, proxies' and CDNs' logs) and,
// for the text's lifetime, would replay the secret for whoever saw it.
const SecretDirective = "secret"

// HoldsSecret reports whether doc, validated against s, writes a value of an
// argument or input field marked @secret in its text: as a literal, in any of
// its operations or fragments (a stored text can be run with any of its
// operations), or as the default of a variable used there. A value sent in a
// variable is not in the text; an explicit null holds nothing.
func HoldsSecret(s *ast.Schema, doc *ast.QueryDocument) bool {
	w := secretWalker{schema: s, doc: doc}
	for _, op := range doc.Operations {
		if w.selections(op.SelectionSet) {
			return true
		}
	}
	for _, f := range doc.Fragments {
		if w.selections(f.SelectionSet) {
			return true
		}
	}
	return false
}

// secretWalker looks for secret literals in one document.
type secretWalker struct {
	schema *ast.Schema
	doc    *ast.QueryDocument
}

func secret(d ast.DirectiveList) bool { return d.ForName(SecretDirective) != nil }

func (w secretWalker) selections(set ast.SelectionSet) bool {
	for _, sel := range set {
		switch sel := sel.(type) {
		case *ast.Field:
			if sel.Definition != nil {
				for _, a := range sel.Arguments {
					if d := sel.Definition.Arguments.ForName(a.Name); d != nil && w.value(a.Value, d.Type, secret(d.Directives)) {
						return true
					}
				}
			}
			if w.selections(sel.SelectionSet) {
				return true
			}
		case *ast.InlineFragment:
			if w.selections(sel.SelectionSet) {
				return true
			}
		}
		// A fragment spread's fragment is walked with doc.Fragments.
	}
	return false
}

// value reports whether v, of type t, holds a secret literal; isSecret says
// that v is in a position marked @secret.
func (w secretWalker) value(v *ast.Value, t *ast.Type, isSecret bool) bool {
	if v == nil {
		return false
	}
	switch v.Kind {
	case ast.NullValue:
		return false
	case ast.Variable:
		// The variable's default is in the text; a fragment's variable may
		// be any operation's.
		for _, op := range w.doc.Operations {
			if d := op.VariableDefinitions.ForName(v.Raw); d != nil && w.value(d.DefaultValue, d.Type, isSecret) {
				return true
			}
		}
		return false
	case ast.ListValue:
		if t != nil && t.Elem != nil {
			t = t.Elem
		}
		for _, c := range v.Children {
			if w.value(c.Value, t, isSecret) {
				return true
			}
		}
		return false
	case ast.ObjectValue:
		var def *ast.Definition
		if t != nil && w.schema != nil {
			def = w.schema.Types[t.Name()]
		}
		for _, c := range v.Children {
			var ft *ast.Type
			fieldSecret := isSecret
			if def != nil {
				if f := def.Fields.ForName(c.Name); f != nil {
					ft, fieldSecret = f.Type, isSecret || secret(f.Directives)
				}
			}
			if w.value(c.Value, ft, fieldSecret) {
				return true
			}
		}
		return false
	default: // a scalar or enum literal
		return isSecret
	}
}
