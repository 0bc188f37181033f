package ratelimit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/cpumeter"
	"taskflow/errs"
)

// schemaOnly is an ExecutableSchema that has only its schema: pricing reads
// nothing else.
type schemaOnly struct {
	graphql.ExecutableSchema
	s *ast.Schema
}

func (s schemaOnly) Schema() *ast.Schema { return s.s }

// Pricing is charged to the caller's turn (cpumeter), as parsing and
// validating are: counting the fields of an introspection refused for its
// cost takes milliseconds that nothing else charges (a refused document
// costs no points), so without the meter a caller could send such documents
// back to back for free.
func TestPricingIsMetered(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../schema/*.graphqls")
	var srcs []*ast.Source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, &ast.Source{Name: f, Input: string(b)})
	}
	schema := gqlparser.MustLoadSchema(srcs...)
	var b strings.Builder
	b.WriteString("{ __schema { types { ...A } } }\nfragment A on __Type {")
	for i := range 256 {
		fmt.Fprintf(&b, " f%d: fields { ...F }", i)
	}
	b.WriteString(" }\nfragment R on __Type { name kind ofType { name kind ofType { name kind ofType { name } } } }\n")
	b.WriteString("fragment F on __Field { name description args { name description type { ...R } defaultValue } type { ...R } isDeprecated deprecationReason }\n")
	doc, gqlErrs := gqlparser.LoadQuery(schema, b.String())
	if gqlErrs != nil {
		t.Fatal(gqlErrs)
	}
	l, err := New(Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	ext := l.Extension()
	if err := ext.Validate(schemaOnly{s: schema}); err != nil {
		t.Fatal(err)
	}
	ctx, meter := cpumeter.With(WithOutcome(context.Background()))
	rc := &graphql.OperationContext{Doc: doc, Operation: doc.Operations[0], Variables: map[string]any{}}
	gqlErr := ext.(graphql.OperationContextMutator).MutateOperationContext(ctx, rc)
	if gqlErr == nil || gqlErr.Extensions["code"] != string(errs.CodeQueryTooCostly) {
		t.Fatalf("256 aliases of every field of every type: %v", gqlErr)
	}
	if meter.Spent() <= 0 {
		t.Fatal("pricing was not metered")
	}
}
