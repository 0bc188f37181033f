package idempotency

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"
)

// decodeVars decodes JSON variables the way gqlgen does (numbers as json.Number).
func decodeVars(raw []byte) (map[string]any, bool) {
	vars := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return vars, true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&vars); err != nil || vars == nil {
		return nil, false
	}
	return vars, true
}

// FuzzFingerprint fingerprints every root field of arbitrary valid mutation
// documents with arbitrary variables: it never panics, gives 32 bytes, the same
// bytes every time, the oracle's (encoding/json's) bytes, and the same bytes for
// the variables written in another key order, and ignores the value of the
// idempotency key.
func FuzzFingerprint(f *testing.F) {
	f.Add(`mutation { createTask(input: {projectId: "p1", title: "T", priority: HIGH}, idempotencyKey: "k") { id } }`, ``)
	f.Add(`mutation($in: CreateTaskInput!, $k: String) { createTask(input: $in, idempotencyKey: $k) { id } }`,
		`{"in": {"title": "T", "priority": "HIGH", "projectId": "p1", "dueDate": "2026-01-02T03:04:05+02:00"}, "k": "x"}`)
	f.Add(`mutation($id: ID!, $in: UpdateTaskInput!) { updateTask(id: $id, input: $in) { id } }`,
		`{"id": 12345678901234567890, "in": {"description": null, "assigneeId": 7}}`)
	f.Add(`mutation($w: ID!, $e: String!, $r: Role!) { addMember(workspaceId: $w, email: $e, role: $r) { role } a: removeMember(workspaceId: $w, userId: "u") }`,
		`{"w": "w1", "e": "\u00e9@example.com", "r": "ADMIN"}`)
	f.Add(`mutation { createWorkspace(input: {name: "\uD83D\uDE00"}) { id } login(email: "a", password: "b") { token } }`, `{}`)
	f.Add(`mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
		`{"in": {"title": "<b>\u2028\ud800\u0000</b> & \"q\"", "priority": "LOW", "projectId": 1.50}}`)
	f.Fuzz(func(t *testing.T, query, rawVars string) {
		vars, ok := decodeVars([]byte(rawVars))
		if !ok {
			return
		}
		doc, errs := gqlparser.LoadQuery(schema, query)
		if errs != nil {
			return
		}
		for _, op := range doc.Operations {
			if op.Operation != ast.Mutation {
				continue
			}
			coerced, err := validator.VariableValues(schema, op, vars)
			if err != nil {
				continue
			}
			reordered := reencode(t, coerced)
			for _, sel := range op.SelectionSet {
				field, ok := sel.(*ast.Field)
				if !ok || field.Definition == nil {
					continue
				}
				a, err := Fingerprint(schema, field, coerced)
				if err != nil {
					continue
				}
				b, err := Fingerprint(schema, field, coerced)
				if err != nil || !bytes.Equal(a, b) || len(a) != 32 {
					t.Fatalf("%s: fingerprints %x and %x (%v)", field.Name, a, b, err)
				}
				if o, err := oracleFingerprint(schema, field, coerced); err != nil || !bytes.Equal(a, o) {
					t.Fatalf("%s: fingerprint %x; the oracle's %x (%v)", field.Name, a, o, err)
				}
				if c, err := Fingerprint(schema, field, reordered); err != nil || !bytes.Equal(a, c) {
					t.Fatalf("%s: %x, with the variables re-encoded %x (%v)", field.Name, a, c, err)
				}
				if k := field.Arguments.ForName(keyArg); k != nil && k.Value.Kind == ast.Variable {
					other := map[string]any{}
					for n, v := range coerced {
						other[n] = v
					}
					other[k.Value.Raw] = "another key"
					if c, err := Fingerprint(schema, field, other); err != nil || !bytes.Equal(a, c) {
						t.Fatalf("%s: the key's value changed the fingerprint (%v)", field.Name, err)
					}
				}
			}
		}
	})
}

// reencode round-trips coerced variables through JSON, which writes object keys
// in another order than they came.
func reencode(t *testing.T, vars map[string]any) map[string]any {
	b, err := json.Marshal(vars)
	if err != nil {
		return vars
	}
	out, ok := decodeVars(b)
	if !ok {
		t.Fatalf("re-decode %s", b)
	}
	return out
}
