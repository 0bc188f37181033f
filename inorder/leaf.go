package inorder

import (
	"io"

	"github.com/99designs/gqlgen/graphql"
)

// String returns the Marshaler of the string at p: it writes *p as
// graphql.MarshalString writes it, when the response is written. gqlgen's
// MarshalString allocates a closure holding the string for every string in
// a response; a struct whose only field is a pointer goes into an interface
// without an allocation. The generator rewrites every non-null String or ID
// field read from a field of its object (a pointer) into String(&obj.Field):
// a resolved object does not change before its response is written
// (docs/decisions/2026-12-03-leaf-fields.md, second addendum).
func String(p *string) graphql.Marshaler { return stringAt{p} }

// stringAt is the Marshaler String returns.
type stringAt struct{ p *string }

// MarshalGQL writes the string as graphql.MarshalString does.
func (s stringAt) MarshalGQL(w io.Writer) { graphql.MarshalString(*s.p).MarshalGQL(w) }

// Value returns the Marshaler of the value at p, whose own MarshalGQL writes
// it when the response is written: an enum, which gqlgen's marshaler returns
// as itself, and so boxes (an allocation for each) into the interface. The
// generator rewrites every non-null enum field read from a field of its
// object (a pointer) into Value(&obj.Field).
func Value[T graphql.Marshaler](p *T) graphql.Marshaler { return valueAt[T]{p} }

// valueAt is the Marshaler Value returns.
type valueAt[T graphql.Marshaler] struct{ p *T }

// MarshalGQL writes the value with its own MarshalGQL.
func (v valueAt[T]) MarshalGQL(w io.Writer) { (*v.p).MarshalGQL(w) }
