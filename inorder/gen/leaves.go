package main

import (
	"fmt"
	"regexp"
	"strings"
)

// leafField matches gqlgen's function for a field whose value is a struct
// field of its object, with no resolver, no arguments and no directives (its
// codegen/field.gotpl): the function's name, the fieldContext function, the
// struct field and the marshaler. gqlgen resolves such a field as any other:
// a FieldContext, a context.WithValue, the field middleware and the
// marshaler, about eight allocations for a string; rewriteLeaves marshals the
// struct field at once instead, when that answers the same.
var leafField = regexp.MustCompile(`(?m)^func \(ec \*executionContext\) (_\w+)\(ctx context\.Context, field graphql\.CollectedField, obj (\*?)[\w.]+\) \(ret graphql\.Marshaler\) \{
(	return graphql\.ResolveField\(
		ctx,
		ec\.OperationContext,
		field,
		func\(ctx context\.Context, field graphql\.CollectedField\) \(\*graphql\.FieldContext, error\) \{
			return ec\.(fieldContext_\w+)\(ctx, field\)
		\},
		func\(ctx context\.Context\) \(any, error\) \{
			return obj\.(\w+), nil
		\},
		nil,
		func\(ctx context\.Context, selections ast\.SelectionSet, v ([^\n]+)\) graphql\.Marshaler \{
			return ec\.([^(\s]+)\(ctx, selections, v\)
		\},
		(?:true|false),
		(?:true|false),
	\)
)\}
`)

// checkedMarshaler is the body of gqlgen's marshaler of a non-null scalar
// (codegen/type.gotpl): the scalar's marshal function, then an error (at the
// field's path, from its FieldContext) when that gives null.
var checkedMarshaler = regexp.MustCompile(`^	_ = sel
	res := (graphql\.Marshal\w+)\(v\)
	if res == graphql\.Null \{
		graphql\.AddInvalidNullFromMarshaler\(ctx, "[^"\n]+"\)
	\}
	return res
$`)

// rewriteLeaves rewrites the function of every leaf field (leafField) whose
// marshaler allows it, and returns the source and how many it rewrote:
//   - of an object passed as a pointer, an enum (whose marshaler is
//     `return v`) is inorder.Value(&obj.Field), and a non-null String or ID
//     (MarshalString or MarshalID, which never give null) is
//     inorder.String(&obj.Field): the same bytes, written when the response
//     is, without boxing the value or a closure around it;
//   - any other marshaler that uses neither the context nor the executor (an enum's
//     `return v`, a nullable scalar's `if v == nil { return graphql.Null }`
//     then its marshal function) is called with the struct field at once:
//     without the field's FieldContext it answers the same;
//   - a checkedMarshaler's marshal function is called with the struct field
//     at once, and its answer returned unless it is null; a null (a zero
//     time.Time, say) goes through gqlgen's way, which reports the error at
//     the field's path.
//
// Leaf fields so rewritten skip the field middleware: the handler refuses
// any extension that intercepts fields (httpapi). A field whose field
// context is not gqlgen's NewScalarFieldContext (an object's field, or one
// with arguments to parse), or whose marshaler is of another shape, keeps
// gqlgen's function.
func rewriteLeaves(src string) (string, int, error) {
	var failed error
	n := 0
	out := leafField.ReplaceAllStringFunc(src, func(fn string) string {
		m := leafField.FindStringSubmatch(fn)
		name, pointer, original, fieldContext, goField, vtype, marshaler := m[1], m[2] == "*", m[3], m[4], m[5], m[6], m[7]
		fail := func(err error) string {
			if failed == nil {
				failed = fmt.Errorf("%s: %w", name, err)
			}
			return fn
		}
		start, end, err := body(src, fieldContext)
		if err != nil {
			return fail(err)
		}
		if !strings.Contains(src[start:end], "\treturn graphql.NewScalarFieldContext(") {
			return fn // an object's field, or one with arguments to parse
		}
		if start, end, err = body(src, marshaler); err != nil {
			return fail(err)
		}
		mbody := src[start:end]
		mbody = mbody[strings.Index(mbody, "{\n")+2 : len(mbody)-2]
		head := fn[:strings.Index(fn, "{\n")+2]
		value := "obj." + goField
		c := checkedMarshaler.FindStringSubmatch(mbody)
		switch {
		case pointer && strings.TrimSpace(mbody) == "return v":
			n++
			return head + "\treturn inorder.Value(&" + value + ")\n}\n"
		case pointer && vtype == "string" && c != nil && (c[1] == "graphql.MarshalString" || c[1] == "graphql.MarshalID"):
			n++
			return head + "\treturn inorder.String(&" + value + ")\n}\n"
		case plainMarshaler(mbody):
			n++
			return head + "\treturn ec." + marshaler + "(ctx, field.Selections, " + value + ")\n}\n"
		case c != nil:
			n++
			return head + "\tif res := " + c[1] + "(" + value + "); res != graphql.Null {\n\t\treturn res\n\t}\n" + original + "}\n"
		}
		return fn
	})
	if failed != nil {
		return "", 0, failed
	}
	return out, n, nil
}

// plainMarshaler says whether a marshaler's body uses neither its context
// (but for `_ = ctx`) nor the executor, nor reports an error.
func plainMarshaler(body string) bool {
	return strings.Count(body, "ctx") == strings.Count(body, "_ = ctx") &&
		!strings.Contains(body, "ec.") && !strings.Contains(body, "graphql.Add")
}
