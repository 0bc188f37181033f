package main

import (
	"strings"
	"testing"
)

const executor = `package graph

func (ec *executionContext) marshalNTask2ᚕTasks(ctx context.Context, sel ast.SelectionSet, v []*store.Task) graphql.Marshaler {
	ret := ` + call + `
		return ec.marshalNTask2Task(ctx, sel, v[i])
	})
	return ret
}

func (ec *executionContext) marshalNNode2ᚕNodes(ctx context.Context, sel ast.SelectionSet, v []Node) graphql.Marshaler {
	ret := ` + call + `
		return ec.marshalNNode2Node(ctx, sel, v[i])
	})
	return ret
}
`

// The marshaler of a list of objects calls inorder with its element type;
// the others are left as gqlgen wrote them.
func TestRewriteCalls(t *testing.T) {
	out, n, err := rewriteCalls(executor, map[string]string{"marshalNTask2ᚕTasks": "Task"})
	if err != nil || n != 1 {
		t.Fatalf("rewriteCalls: %d, %v", n, err)
	}
	if !strings.Contains(out, `inorder.MarshalSlice(ctx, ListOrder, "Task", sel, len(v), func(`) {
		t.Errorf("the object list's marshaler was not rewritten:\n%s", out)
	}
	if strings.Count(out, call) != 1 || countCalls(out, map[string]bool{"marshalNNode2ᚕNodes": true}) != 1 {
		t.Errorf("the interface list's marshaler was rewritten:\n%s", out)
	}
}

// A marshaler that is not the shape gqlgen wrote is an error, not a silent
// skip.
func TestRewriteCallsRefusesAnotherShape(t *testing.T) {
	for name, src := range map[string]string{
		"no such marshaler": executor,
		"another call":      strings.Replace(executor, call, "graphql.MarshalSliceConcurrently(ctx, len(v), 8, false, func(ctx context.Context, i int) graphql.Marshaler {", 1),
	} {
		fn := "marshalNTask2ᚕTasks"
		if name == "no such marshaler" {
			fn = "marshalNProject2ᚕProjects"
		}
		if _, _, err := rewriteCalls(src, map[string]string{fn: "Task"}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// objectMarshaler is gqlgen's marshaler of an object with a concurrent field
// (abridged).
const objectMarshaler = `func (ec *executionContext) _Task(ctx context.Context, sel ast.SelectionSet, obj *store.Task) graphql.Marshaler {
	` + groupCall + `	for i, field := range fields {
		switch field.Name {
		case "assignee":
			` + fieldCall + `
				true, false,
				func(ctx context.Context) graphql.Marshaler {
					return ec._Task_assignee(ctx, field, obj)
				})
		}
	}
	out.Dispatch(ctx)
	return out
}
`

// An object's concurrent fields are scheduled, its group of deferred fields
// made, and its field set returned, through inorder; a call of another
// shape, or none, is an
// error.
func TestRewriteObjectCalls(t *testing.T) {
	out, err := rewriteObjectCalls(objectMarshaler)
	if err != nil || strings.Contains(out, fieldCall) || strings.Contains(out, groupCall) ||
		!strings.Contains(out, "inorder.ResolveConcurrently(ctx, out, ec.OperationContext, &deferred, i,\n\t\t\t\ttrue, false,") ||
		!strings.Contains(out, "deferred := inorder.NewDeferredGroup(ctx, fields)\n") ||
		!strings.Contains(out, "\n\treturn inorder.Object(fields, out)\n}\n") {
		t.Fatalf("rewriteObjectCalls: %v\n%s", err, out)
	}
	for name, src := range map[string]string{
		"none":          "package graph\n",
		"another shape": objectMarshaler + "\nout.ResolveConcurrently(oc, &deferred, i, true, false, f)\n",
		"another group": objectMarshaler + "\ndeferred := graphql.NewDeferredGroup(innerCtx)\n",
		"another end":   strings.Replace(objectMarshaler, "\treturn out\n", "\treturn &out\n", 1),
	} {
		if _, err := rewriteObjectCalls(src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
