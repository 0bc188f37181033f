// Command gen runs gqlgen's generate (as `go run
// github.com/99designs/gqlgen generate` does, with gqlgen.yml) and then
// makes its list marshalers of object types ask inorder whether their
// elements may be marshaled one after another: it writes the schema's
// fields for inorder.Schema next to the generated executor and rewrites
// each such call of graphql.MarshalSliceConcurrently in it into
// inorder.MarshalSlice. Lists of interfaces and unions keep gqlgen's call.
// It rewrites the object marshalers' scheduling of concurrent fields
// (FieldSet.ResolveConcurrently) into inorder.ResolveConcurrently, which
// resolves them at once below a list marshaled in order, and their making
// of a group of deferred fields into inorder.NewDeferredGroup, which makes
// none for an object without a deferred field.
// It rewrites the function of each leaf field read from a struct field
// (a scalar or an enum, no resolver, arguments or directives) to marshal the
// struct field at once, without gqlgen's FieldContext and field middleware
// (rewriteLeaves).
// It fails, leaving gqlgen's output as it is, when the calls are not the
// shape it expects (a gqlgen upgrade that changed them).
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/99designs/gqlgen/api"
	"github.com/99designs/gqlgen/codegen"
	"github.com/99designs/gqlgen/codegen/config"
	"github.com/vektah/gqlparser/v2/ast"
)

// call is gqlgen's call in a list marshaler of a non-scalar type (its
// codegen/type.gotpl, with no worker limit and the panic handler on).
const call = "graphql.MarshalSliceConcurrently(ctx, len(v), 0, false, func(ctx context.Context, i int) graphql.Marshaler {"

// fieldCall is gqlgen's call in an object marshaler for a concurrent field
// (its codegen/object.gotpl), rewritten into inorder.ResolveConcurrently.
const fieldCall = "out.ResolveConcurrently(ec.OperationContext, &deferred, i,"

// groupCall is gqlgen's making of an object's group of deferred fields (its
// codegen/object.gotpl), after the object's field set; rewritten into
// inorder.NewDeferredGroup, which makes an empty group for an object with no
// deferred field.
const groupCall = "out := graphql.NewFieldSet(fields)\n\tdeferred := graphql.NewDeferredGroup(ctx)\n"

// objectReturn is the end of gqlgen's object marshaler (its
// codegen/object.gotpl): its field set, marshaled later by gqlgen's
// FieldSet.MarshalGQL; rewritten to return inorder.Object.
const objectReturn = "\n\treturn out\n}\n"

// importPath is the package of inorder.MarshalSlice.
const importPath = "taskflow/inorder"

// schemaVar is the generated inorder.Schema's name in the executor's package.
const schemaVar = "ListOrder"

func main() {
	log.SetFlags(0)
	cfg, err := config.LoadConfigFromDefaultLocations()
	if err != nil {
		log.Fatal(err)
	}
	p := &plugin{}
	if err := api.Generate(cfg, api.AddPlugin(p)); err != nil {
		log.Fatal(err)
	}
	if p.data == nil {
		log.Fatal("gqlgen ran no code generator plugin")
	}
	if err := rewrite(cfg, p.data); err != nil {
		log.Fatal(err)
	}
}

// plugin keeps gqlgen's model of the schema for rewrite.
type plugin struct{ data *codegen.Data }

func (*plugin) Name() string { return "inorder" }

func (p *plugin) GenerateCode(data *codegen.Data) error {
	p.data = data
	return nil
}

// rewrite writes the schema's fields into inorder_gen.go beside the
// executor and rewrites the executor's list marshalers of object types.
func rewrite(cfg *config.Config, data *codegen.Data) error {
	exec := cfg.Exec.Filename
	src, err := os.ReadFile(exec)
	if err != nil {
		return err
	}
	// Each list of a non-scalar type has one marshaler, named by its
	// TypeReference: the object ones are rewritten, the others kept.
	objects, others := map[string]string{}, map[string]bool{}
	for _, ref := range data.ReferencedTypes {
		if !ref.IsSlice() || ref.IsScalar() || ref.Definition == nil {
			continue
		}
		if ref.Definition.Kind == ast.Object {
			objects[ref.MarshalFunc()] = ref.Definition.Name
		} else {
			others[ref.MarshalFunc()] = true
		}
	}
	out, n, err := rewriteCalls(string(src), objects)
	if err != nil {
		return err
	}
	total, named := strings.Count(string(src), "graphql.MarshalSliceConcurrently("), n+countCalls(string(src), others)
	if total != named {
		return fmt.Errorf("%s: %d calls of graphql.MarshalSliceConcurrently, %d of them in the list marshalers gqlgen's types name", exec, total, named)
	}
	if out, err = rewriteObjectCalls(out); err != nil {
		return fmt.Errorf("%s: %w", exec, err)
	}
	if out, n, err = rewriteLeaves(out); err != nil {
		return fmt.Errorf("%s: %w", exec, err)
	} else if n == 0 {
		return fmt.Errorf("%s: no leaf field of the shape rewriteLeaves expects", exec)
	}
	out = strings.Replace(out, "import (\n", "import (\n\t"+strconv.Quote(importPath)+"\n", 1)
	formatted, err := format.Source([]byte(out))
	if err != nil {
		return fmt.Errorf("%s after the rewrite: %w", exec, err)
	}
	if err := os.WriteFile(exec, formatted, 0o644); err != nil {
		return err
	}
	table, err := format.Source(schemaFile(cfg.Exec.Package, data))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(filepath.Dir(exec), "inorder_gen.go"), table, 0o644)
}

// rewriteCalls replaces call in the body of each marshaler of objects (its
// name to the list's element type) and returns the source and how many it
// replaced. Every marshaler must hold exactly one call.
func rewriteCalls(src string, objects map[string]string) (string, int, error) {
	names := make([]string, 0, len(objects))
	for name := range objects {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		start, end, err := body(src, name)
		if err != nil {
			return "", 0, err
		}
		fn := src[start:end]
		if c := strings.Count(fn, call); c != 1 {
			return "", 0, fmt.Errorf("%s: %d calls of %q, want 1", name, c, call)
		}
		fn = strings.Replace(fn, call, "inorder.MarshalSlice(ctx, "+schemaVar+", "+strconv.Quote(objects[name])+", sel, len(v), func(ctx context.Context, i int) graphql.Marshaler {", 1)
		src = src[:start] + fn + src[end:]
	}
	return src, len(names), nil
}

// rewriteObjectCalls rewrites the three calls of every object marshaler that
// inorder takes over: each fieldCall, gqlgen's scheduling of an object's
// concurrent field, becomes inorder.ResolveConcurrently, each groupCall
// becomes inorder.NewDeferredGroup, and each objectReturn returns
// inorder.Object. Every call of FieldSet.ResolveConcurrently must be a
// fieldCall (the root types' calls, ResolveRootConcurrently, are kept),
// every call of graphql.NewDeferredGroup a groupCall, and every object
// marshaler (one per groupCall) must end in an objectReturn.
func rewriteObjectCalls(src string) (string, error) {
	if fields, calls := strings.Count(src, fieldCall), strings.Count(src, ".ResolveConcurrently("); fields == 0 || fields != calls {
		return "", fmt.Errorf("%d calls of ResolveConcurrently, %d of them %q", calls, fields, fieldCall)
	}
	if groups, calls := strings.Count(src, groupCall), strings.Count(src, "graphql.NewDeferredGroup("); groups == 0 || groups != calls {
		return "", fmt.Errorf("%d calls of graphql.NewDeferredGroup, %d of them %q", calls, groups, groupCall)
	}
	if returns := strings.Count(src, objectReturn); returns != strings.Count(src, groupCall) {
		return "", fmt.Errorf("%d object marshalers, %d of them ending in %q", strings.Count(src, groupCall), returns, objectReturn)
	}
	src = strings.ReplaceAll(src, objectReturn, "\n\treturn inorder.Object(fields, out)\n}\n")
	src = strings.ReplaceAll(src, groupCall, "out := graphql.NewFieldSet(fields)\n\tdeferred := inorder.NewDeferredGroup(ctx, fields)\n")
	return strings.ReplaceAll(src, fieldCall, "inorder.ResolveConcurrently(ctx, out, ec.OperationContext, &deferred, i,"), nil
}

// countCalls counts the calls of graphql.MarshalSliceConcurrently in the
// marshalers named by names.
func countCalls(src string, names map[string]bool) int {
	n := 0
	for name := range names {
		if start, end, err := body(src, name); err == nil {
			n += strings.Count(src[start:end], "graphql.MarshalSliceConcurrently(")
		}
	}
	return n
}

// body returns where the executor's method name starts and ends in src.
func body(src, name string) (int, int, error) {
	head := "func (ec *executionContext) " + name + "("
	start := strings.Index(src, head)
	if start < 0 {
		return 0, 0, fmt.Errorf("no marshaler %s in the executor", name)
	}
	end := strings.Index(src[start:], "\n}\n")
	if end < 0 {
		return 0, 0, fmt.Errorf("marshaler %s has no end", name)
	}
	return start, start + end + 3, nil
}

// schemaFile is the source of the executor package's inorder.Schema.
func schemaFile(pkg string, data *codegen.Data) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by inorder/gen. DO NOT EDIT.\n\npackage %s\n\nimport %q\n\n", pkg, importPath)
	fmt.Fprintf(&b, "// %s is the schema's object types' fields, for the list marshalers'\n// inorder.MarshalSlice.\nvar %s = inorder.Schema{\n", schemaVar, schemaVar)
	objects := append(codegen.Objects{}, data.Objects...)
	sort.Slice(objects, func(i, j int) bool { return objects[i].Name < objects[j].Name })
	for _, o := range objects {
		fmt.Fprintf(&b, "%q: {\n", o.Name)
		for _, f := range o.Fields {
			concurrent, typ := f.IsConcurrent(), ""
			if def := f.TypeReference.Definition; def != nil {
				switch def.Kind {
				case ast.Object:
					typ = def.Name
				case ast.Interface, ast.Union:
					concurrent = true
				}
			}
			fmt.Fprintf(&b, "%q: {Concurrent: %t, Type: %q},\n", f.Name, concurrent, typ)
		}
		b.WriteString("},\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}
