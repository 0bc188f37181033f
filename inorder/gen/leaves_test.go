package main

import (
	"strings"
	"testing"
)

// leafFn is gqlgen's function of field (of Task) read from the struct field
// goField and marshaled by marshaler, with its field context; fieldContext is
// the field context's body.
func leafFn(field, goField, vtype, marshaler, fieldContext string) string {
	return `func (ec *executionContext) _Task_` + field + `(ctx context.Context, field graphql.CollectedField, obj *store.Task) (ret graphql.Marshaler) {
	return graphql.ResolveField(
		ctx,
		ec.OperationContext,
		field,
		func(ctx context.Context, field graphql.CollectedField) (*graphql.FieldContext, error) {
			return ec.fieldContext_Task_` + field + `(ctx, field)
		},
		func(ctx context.Context) (any, error) {
			return obj.` + goField + `, nil
		},
		nil,
		func(ctx context.Context, selections ast.SelectionSet, v ` + vtype + `) graphql.Marshaler {
			return ec.` + marshaler + `(ctx, selections, v)
		},
		true,
		true,
	)
}
func (ec *executionContext) fieldContext_Task_` + field + `(_ context.Context, field graphql.CollectedField) (fc *graphql.FieldContext, err error) {
` + fieldContext + `
}

`
}

const scalarContext = `	return graphql.NewScalarFieldContext("Task", field, false, false, "String")`

// marshalers are gqlgen's marshalers of the shapes rewriteLeaves knows, and
// two it does not.
const marshalers = `func (ec *executionContext) marshalNString2string(ctx context.Context, sel ast.SelectionSet, v string) graphql.Marshaler {
	_ = sel
	res := graphql.MarshalString(v)
	if res == graphql.Null {
		graphql.AddInvalidNullFromMarshaler(ctx, "String!")
	}
	return res
}

func (ec *executionContext) marshalNTaskStatus2Status(ctx context.Context, sel ast.SelectionSet, v store.TaskStatus) graphql.Marshaler {
	return v
}

func (ec *executionContext) marshalOString2ᚖstring(ctx context.Context, sel ast.SelectionSet, v *string) graphql.Marshaler {
	if v == nil {
		return graphql.Null
	}
	_ = sel
	_ = ctx
	res := graphql.MarshalString(*v)
	return res
}

func (ec *executionContext) marshalNAny2interface(ctx context.Context, sel ast.SelectionSet, v any) graphql.Marshaler {
	if v == nil {
		if !graphql.HasFieldError(ctx, graphql.GetFieldContext(ctx)) {
			graphql.AddErrorf(ctx, "the requested element is null which the schema does not allow")
		}
		return graphql.Null
	}
	res := graphql.MarshalAny(v)
	return res
}

func (ec *executionContext) marshalNUser2User(ctx context.Context, sel ast.SelectionSet, v store.User) graphql.Marshaler {
	return ec._User(ctx, sel, &v)
}
`

// timeMarshaler is gqlgen's marshaler of a non-null Time: a checked
// scalar whose marshal function can give null (a zero time).
const timeMarshaler = `func (ec *executionContext) marshalNTime2timeᚐTime(ctx context.Context, sel ast.SelectionSet, v time.Time) graphql.Marshaler {
	_ = sel
	res := graphql.MarshalTime(v)
	if res == graphql.Null {
		graphql.AddInvalidNullFromMarshaler(ctx, "Time!")
	}
	return res
}

`

// A leaf whose marshaler needs no field context marshals its struct field at
// once; a checked scalar marshals at once unless that gives null, then goes
// gqlgen's way; any other field keeps gqlgen's function.
func TestRewriteLeaves(t *testing.T) {
	kept := map[string]string{
		"metadata": leafFn("metadata", "Metadata", "any", "marshalNAny2interface", scalarContext),
		"creator":  leafFn("creator", "Creator", "store.User", "marshalNUser2User", scalarContext),
		"limited":  leafFn("limited", "Limited", "string", "marshalNString2string", "\targs, err := ec.field_Task_limited_args(ctx, field.ArgumentMap(ec.Variables))\n\treturn nil, err"),
		"method":   strings.Replace(leafFn("method", "Method", "string", "marshalNString2string", scalarContext), "return obj.Method, nil", "return obj.Method(), nil", 1),
		"directed": strings.Replace(leafFn("directed", "Directed", "string", "marshalNString2string", scalarContext), "\t\tnil,\n", "\t\tfunc(ctx context.Context, next graphql.Resolver) graphql.Resolver { return next },\n", 1),
	}
	byValue := func(fn string) string { return strings.Replace(fn, "obj *store.Task)", "obj store.Task)", 1) }
	src := "package graph\n\n" + marshalers + timeMarshaler +
		leafFn("title", "Title", "string", "marshalNString2string", scalarContext) +
		leafFn("status", "Status", "store.TaskStatus", "marshalNTaskStatus2Status", scalarContext) +
		leafFn("description", "Description", "*string", "marshalOString2ᚖstring", scalarContext) +
		leafFn("createdAt", "CreatedAt", "time.Time", "marshalNTime2timeᚐTime", scalarContext) +
		byValue(leafFn("name", "Name", "string", "marshalNString2string", scalarContext)) +
		byValue(leafFn("state", "State", "store.TaskStatus", "marshalNTaskStatus2Status", scalarContext))
	for _, fn := range kept {
		src += fn
	}
	out, n, err := rewriteLeaves(src)
	if err != nil || n != 6 {
		t.Fatalf("rewriteLeaves: %d, %v\n%s", n, err, out)
	}
	for _, want := range []string{
		"obj *store.Task) (ret graphql.Marshaler) {\n\treturn inorder.String(&obj.Title)\n}\n",
		"obj *store.Task) (ret graphql.Marshaler) {\n\treturn inorder.Value(&obj.Status)\n}\n",
		"obj *store.Task) (ret graphql.Marshaler) {\n\treturn ec.marshalOString2ᚖstring(ctx, field.Selections, obj.Description)\n}\n",
		"obj *store.Task) (ret graphql.Marshaler) {\n\tif res := graphql.MarshalTime(obj.CreatedAt); res != graphql.Null {\n\t\treturn res\n\t}\n\treturn graphql.ResolveField(\n",
		// An object passed by value: &obj.Field would move it to the heap.
		"obj store.Task) (ret graphql.Marshaler) {\n\tif res := graphql.MarshalString(obj.Name); res != graphql.Null {\n\t\treturn res\n\t}\n\treturn graphql.ResolveField(\n",
		"obj store.Task) (ret graphql.Marshaler) {\n\treturn ec.marshalNTaskStatus2Status(ctx, field.Selections, obj.State)\n}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("not rewritten: %q\n%s", want, out)
		}
	}
	for name, fn := range kept {
		if !strings.Contains(out, fn) {
			t.Errorf("%s rewritten:\n%s", name, out)
		}
	}
	// A leaf whose field context or marshaler is missing is an error.
	if _, _, err := rewriteLeaves("package graph\n\n" + leafFn("title", "Title", "string", "marshalNString2string", scalarContext)); err == nil {
		t.Error("no marshaler: no error")
	}
}
