package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/jsoncanon"
)

// keyArg is the name of the argument that carries an idempotency key.
const keyArg = "idempotencyKey"

// Fingerprint returns the SHA-256 of a mutation call: the field name and its
// arguments, except the idempotency key, coerced against the schema with the
// operation's variables. Coercion makes inline literals and variables alike,
// applies declared defaults (of arguments and of input object fields), turns IDs
// into strings and numbers into their type, and keeps an absent input field apart
// from one given as null. A value that is a Fingerprinter (an uploaded file) counts
// by what it says. The arguments are hashed as JSON with sorted keys, so the order
// of object fields, aliases and the selection set do not change it.
func Fingerprint(schema *ast.Schema, field *ast.Field, vars map[string]any) ([]byte, error) {
	args, err := fingerprintArgs(schema, field, vars)
	if err != nil {
		return nil, err
	}
	b, err := fingerprintJSON(field.Name, args)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// fingerprintArgs returns the arguments Fingerprint hashes: every argument
// of field but the key, coerced, by name.
func fingerprintArgs(schema *ast.Schema, field *ast.Field, vars map[string]any) (map[string]any, error) {
	if field.Definition == nil {
		return nil, fmt.Errorf("fingerprint: field %s has no definition", field.Name)
	}
	c := canonicalizer{schema: schema, vars: vars}
	args := map[string]any{}
	for _, def := range field.Definition.Arguments {
		if def.Name == keyArg {
			continue
		}
		var v any
		present := false
		if a := field.Arguments.ForName(def.Name); a != nil {
			v, present = c.ast(a.Value, def.Type)
		}
		if !present && def.DefaultValue != nil {
			v, present = c.ast(def.DefaultValue, def.Type)
		}
		if present {
			args[def.Name] = v
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return args, nil
}

// fingerprintJSON returns what Fingerprint hashes: the JSON of
// {"field": name, "args": args}, as json.Marshal writes that struct. The
// arguments are written by jsoncanon, byte for byte as encoding/json does,
// without its reflection; arguments it does not handle (a Fingerprinter's
// value of another type, a custom scalar's) are marshaled by encoding/json
// (docs/decisions/2026-12-03-canonical-encoding.md).
func fingerprintJSON(name string, args map[string]any) ([]byte, error) {
	b := append(make([]byte, 0, 256), `{"field":`...)
	b = jsoncanon.AppendString(b, name)
	b = append(b, `,"args":`...)
	if b, ok := jsoncanon.Append(b, args); ok {
		return append(b, '}'), nil
	}
	b, err := json.Marshal(struct {
		Field string         `json:"field"`
		Args  map[string]any `json:"args"`
	}{name, args})
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	return b, nil
}

// Fingerprinter is an argument value whose fingerprint is not its JSON form:
// store.Upload, a file staged under a new name on every retry, counts by its
// bytes' SHA-256, its size and its name.
type Fingerprinter interface {
	IdempotencyFingerprint() any
}

// canonicalizer coerces argument values to canonical Go values for hashing.
type canonicalizer struct {
	schema *ast.Schema
	vars   map[string]any
	err    error
}

// ast coerces a literal (possibly holding variables) to typ. It reports false
// when the value is absent: a variable that was not provided.
func (c *canonicalizer) ast(v *ast.Value, typ *ast.Type) (any, bool) {
	if v == nil {
		return nil, false
	}
	switch v.Kind {
	case ast.Variable:
		val, ok := c.vars[v.Raw]
		if !ok {
			return nil, false
		}
		return c.goValue(val, typ), true
	case ast.NullValue:
		return nil, true
	case ast.ListValue:
		if typ.Elem == nil { // a list literal where a scalar goes: leave it to validation
			return c.goValue(c.literal(v), typ), true
		}
		out := make([]any, 0, len(v.Children))
		for _, child := range v.Children {
			cv, ok := c.ast(child.Value, typ.Elem)
			if !ok {
				cv = nil // an absent variable in a list is null
			}
			out = append(out, cv)
		}
		return out, true
	case ast.ObjectValue:
		def := c.schema.Types[typ.Name()]
		if typ.Elem != nil { // a single value where a list goes
			cv, ok := c.ast(v, typ.Elem)
			if !ok {
				return nil, false
			}
			return []any{cv}, true
		}
		if def == nil || def.Kind != ast.InputObject {
			return c.goValue(c.literal(v), typ), true
		}
		out := map[string]any{}
		for _, f := range def.Fields {
			var fv any
			present := false
			if child := v.Children.ForName(f.Name); child != nil {
				fv, present = c.ast(child, f.Type)
			}
			if !present && f.DefaultValue != nil {
				fv, present = c.ast(f.DefaultValue, f.Type)
			}
			if present {
				out[f.Name] = fv
			}
		}
		return out, true
	default:
		val, err := v.Value(nil)
		if err != nil {
			c.fail(err)
			return nil, true
		}
		if v.Kind == ast.EnumValue {
			val = v.Raw
		}
		return c.goValue(val, typ), true
	}
}

// goValue coerces a value decoded from JSON variables (or a scalar literal) to typ.
func (c *canonicalizer) goValue(v any, typ *ast.Type) any {
	if v == nil {
		return nil
	}
	if f, ok := v.(Fingerprinter); ok {
		return f.IdempotencyFingerprint()
	}
	if typ.Elem != nil {
		list, ok := v.([]any)
		if !ok {
			return []any{c.goValue(v, typ.Elem)}
		}
		out := make([]any, len(list))
		for i, e := range list {
			out[i] = c.goValue(e, typ.Elem)
		}
		return out
	}
	def := c.schema.Types[typ.Name()]
	if def != nil && def.Kind == ast.InputObject {
		obj, ok := v.(map[string]any)
		if !ok {
			return v
		}
		out := map[string]any{}
		for _, f := range def.Fields {
			if fv, ok := obj[f.Name]; ok {
				out[f.Name] = c.goValue(fv, f.Type)
			} else if f.DefaultValue != nil {
				if dv, ok := c.ast(f.DefaultValue, f.Type); ok {
					out[f.Name] = dv
				}
			}
		}
		return out
	}
	switch typ.Name() {
	case "Int":
		if n, ok := number(v); ok && n == math.Trunc(n) {
			return int64(n)
		}
	case "Float":
		if n, ok := number(v); ok {
			return n
		}
	case "ID":
		switch x := v.(type) {
		case json.Number:
			return x.String()
		case int64:
			return strconv.FormatInt(x, 10)
		case int:
			return strconv.Itoa(x)
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
	case "Time":
		if s, ok := v.(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				return t.UTC().Format(time.RFC3339Nano)
			}
		}
		if t, ok := v.(time.Time); ok {
			return t.UTC().Format(time.RFC3339Nano)
		}
	}
	return v
}

// number returns v as a float64 if it is a number.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

func (c *canonicalizer) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// literal returns the Go value of a literal, recording an error it cannot be read.
func (c *canonicalizer) literal(v *ast.Value) any {
	val, err := v.Value(c.vars)
	if err != nil {
		c.fail(err)
	}
	return val
}
