package querydoc

import (
	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// SecretDirective names the schema directive (@secret) that marks an argument
// or an input field as carrying a secret, such as login's password. A text
// that writes such a value inline is run but never stored under its hash
// (package apq): the hash travels where secrets should not (URLs, proxies'
// and CDNs' logs) and, for the text's lifetime, would replay the secret for
// whoever saw it.
const SecretDirective = "secret"

// HoldsSecret reports whether rc's document writes a value of an argument or
// input field marked @secret in its text (SecretIn). It was found once, when
// Extension validated the document, and is kept with it in the Cache: asking
// costs a lookup, whatever the document's size. It is true too when
// Extension did not validate rc's document: what that holds is not known.
func HoldsSecret(rc *graphql.OperationContext) bool {
	p := preparedOf(rc)
	return p == nil || p.doc == nil || p.secret
}

// SecretIn reports whether doc, a validated document, writes a value of an
// argument or input field marked @secret in its text: as a literal, in any
// of its operations or fragments (a stored text can be run with any of its
// operations), or as the default of a variable used there. A value sent in a
// variable is not in the text; an explicit null holds nothing. It reads the
// definitions the validator points the document's fields and values to (no
// lookup in the schema), and walks each operation and fragment definition
// once.
func SecretIn(doc *ast.QueryDocument) bool {
	w := secretWalk{doc: doc}
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

// secretWalk looks for secret literals in one document.
type secretWalk struct{ doc *ast.QueryDocument }

func secret(d ast.DirectiveList) bool { return d.ForName(SecretDirective) != nil }

func (w secretWalk) selections(set ast.SelectionSet) bool {
	for _, sel := range set {
		switch sel := sel.(type) {
		case *ast.Field:
			if sel.Definition != nil {
				for _, a := range sel.Arguments {
					if d := sel.Definition.Arguments.ForName(a.Name); d != nil && w.value(a.Value, secret(d.Directives)) {
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

// value reports whether v holds a secret literal; isSecret says that v is in
// a position marked @secret. An object's fields are found in v.Definition,
// the input type the validator gave it (a list's elements have their
// list's).
func (w secretWalk) value(v *ast.Value, isSecret bool) bool {
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
			if d := op.VariableDefinitions.ForName(v.Raw); d != nil && w.value(d.DefaultValue, isSecret) {
				return true
			}
		}
		return false
	case ast.ListValue:
		for _, c := range v.Children {
			if w.value(c.Value, isSecret) {
				return true
			}
		}
		return false
	case ast.ObjectValue:
		for _, c := range v.Children {
			fieldSecret := isSecret
			if v.Definition != nil {
				if f := v.Definition.Fields.ForName(c.Name); f != nil {
					fieldSecret = isSecret || secret(f.Directives)
				}
			}
			if w.value(c.Value, fieldSecret) {
				return true
			}
		}
		return false
	default: // a scalar or enum literal
		return isSecret
	}
}
