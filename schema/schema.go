// Package schema holds TaskFlow's GraphQL schema, the single source of the
// public contract (the *.graphqls files here), and the tools that keep it
// honest: Introspect renders a schema as the standard introspection result
// committed as public.json, FromIntrospection loads such a result back, and
// Compare lists the changes between two schemas, breaking or not. The test in
// this package fails when the schema breaks the committed contract or the
// artifact is stale; docs/schema.md says how to update it deliberately.
package schema

import (
	"embed"
	"io/fs"
	"sort"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"
)

//go:embed *.graphqls
var files embed.FS

// Sources returns the schema files, in name order.
func Sources() ([]*ast.Source, error) {
	names, err := fs.Glob(files, "*.graphqls")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	srcs := make([]*ast.Source, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, &ast.Source{Name: "schema/" + n, Input: string(b)})
	}
	return srcs, nil
}

// Load parses and validates the schema files. It returns an error if they do
// not form a valid schema.
func Load() (*ast.Schema, error) {
	srcs, err := Sources()
	if err != nil {
		return nil, err
	}
	s, gerr := gqlparser.LoadSchema(srcs...)
	if gerr != nil {
		return nil, gerr
	}
	return Served(s), nil
}

// Unserved names the directives that GraphQL servers may offer and TaskFlow
// does not, each with what a client that sends one is told. gqlparser's
// prelude declares @defer; Served leaves it out, so that introspection (and
// every code generator that reads it) does not promise incremental delivery:
// TaskFlow answers an operation in one response, and a deferred fragment
// used to come back as nulls with "hasNext": true and nothing after.
var Unserved = map[string]string{
	"defer": "TaskFlow does not support @defer: every response is sent whole, in one part. " +
		"Remove the directive; the fields of its fragment are then returned with the rest.",
	"stream": "TaskFlow does not support @stream: every list is sent whole, in one response. " +
		"Remove the directive; the list is then returned with the rest.",
}

// Served returns s without the directives named in Unserved: the schema
// TaskFlow serves and publishes. s is left as it is; the result shares its
// types.
func Served(s *ast.Schema) *ast.Schema {
	served := *s
	served.Directives = make(map[string]*ast.DirectiveDefinition, len(s.Directives))
	for name, d := range s.Directives {
		if _, ok := Unserved[name]; !ok {
			served.Directives[name] = d
		}
	}
	return &served
}

// builtins are the names of the types and directives that every schema gets
// from the GraphQL spec (gqlparser's prelude): they are not TaskFlow's to
// change, so Compare and FromIntrospection leave them out.
var builtins = func() map[string]bool {
	doc := validator.PreludeDocument()
	m := map[string]bool{}
	for _, d := range doc.Definitions {
		m[d.Name] = true
	}
	for _, d := range doc.Directives {
		m["@"+d.Name] = true
	}
	return m
}()

func builtinType(name string) bool { return builtins[name] || len(name) > 1 && name[:2] == "__" }

func builtinDirective(name string) bool { return builtins["@"+name] }
