package httpapi

import (
	"context"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"

	"taskflow/graph"
)

// fieldSpy is an extension that intercepts fields.
type fieldSpy struct{}

func (fieldSpy) ExtensionName() string                   { return "FieldSpy" }
func (fieldSpy) Validate(graphql.ExecutableSchema) error { return nil }
func (fieldSpy) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	return next(ctx)
}

// The server refuses, at start-up, what would see only the fields that are
// not leaves: an extension intercepting fields, and AroundFields; it takes
// the others.
func TestLeafServerRefusesFieldInterceptors(t *testing.T) {
	t.Parallel()
	s := leafServer{handler.New(graph.NewExecutableSchema(graph.Config{}))}
	panics := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	panics("Use", func() { s.Use(fieldSpy{}) })
	panics("AroundFields", func() {
		s.AroundFields(func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) })
	})
	s.Use(extension.Introspection{})
}
