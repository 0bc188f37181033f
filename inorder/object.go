package inorder

import (
	"io"

	"github.com/99designs/gqlgen/graphql"
)

// Object returns an object's field set, out, made of fields, to be marshaled
// as gqlgen's FieldSet.MarshalGQL marshals it (each response name once, in
// order, with its value) but without its allocations: gqlgen's makes a map
// of the names written, a copy of every collected field that escapes, and
// the closures of an iterator, for every object of the response (a fifth of
// a page of tasks' allocations). An object has few fields: a name already
// written is found by looking back. The generator rewrites every object
// marshaler's `return out` into a call of Object.
func Object(fields []graphql.CollectedField, out *graphql.FieldSet) graphql.Marshaler {
	return &object{fields: fields, values: out.Values}
}

// object is the Marshaler Object returns.
type object struct {
	fields []graphql.CollectedField
	values []graphql.Marshaler
}

var (
	openBrace  = []byte{'{'}
	closeBrace = []byte{'}'}
	comma      = []byte{','}
	quote      = []byte{'"'}
	quoteColon = []byte{'"', ':'}
)

// MarshalGQL writes the object as gqlgen's FieldSet.MarshalGQL does.
func (o *object) MarshalGQL(w io.Writer) {
	w.Write(openBrace)
	first := true
	for i := range o.fields {
		name := o.fields[i].Alias
		if written(o.fields[:i], name) {
			continue
		}
		if !first {
			w.Write(comma)
		}
		first = false
		if plainName(name) {
			w.Write(quote)
			io.WriteString(w, name)
			w.Write(quoteColon)
		} else {
			graphql.MarshalString(name).MarshalGQL(w)
			w.Write(quoteColon[1:])
		}
		o.values[i].MarshalGQL(w)
	}
	w.Write(closeBrace)
}

// written says whether one of fields has the response name.
func written(fields []graphql.CollectedField, name string) bool {
	for i := range fields {
		if fields[i].Alias == name {
			return true
		}
	}
	return false
}

// plainName says whether a response name needs no escaping in a JSON string:
// a GraphQL name always ([_A-Za-z][_0-9A-Za-z]*).
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}
