package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"
)

// oracleFingerprint is Fingerprint as it was before fingerprintJSON
// (2026-12-03): the coerced arguments (fingerprintArgs, unchanged) marshaled
// by encoding/json. Fingerprints are stored with idempotency keys, so a byte
// of difference would make a retry look like a reused key.
func oracleFingerprint(schema *ast.Schema, field *ast.Field, vars map[string]any) ([]byte, error) {
	args, err := fingerprintArgs(schema, field, vars)
	if err != nil {
		return nil, err
	}
	b, err := oracleFingerprintJSON(field.Name, args)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

func oracleFingerprintJSON(name string, args map[string]any) ([]byte, error) {
	b, err := json.Marshal(struct {
		Field string         `json:"field"`
		Args  map[string]any `json:"args"`
	}{name, args})
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	return b, nil
}

// role is a named string type: encoding/json writes it as a string, and
// jsoncanon leaves it to encoding/json.
type role string

// TestFingerprintJSONMatchesOracle compares fingerprintJSON with the oracle on
// random argument trees of every type the canonicalizer gives (strings that
// need escaping, int64, float64, json.Number valid and not, an upload's
// fingerprint, nested inputs and lists) and some it passes through (time,
// bytes, named types, NaN): the same bytes, or both fail.
func TestFingerprintJSONMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", "T", "<script>&</script>", "\u2028", "\x00\x1f", "\xff", "😀", "\"\\\n\t", "createTask"}
	var value func(depth int) any
	value = func(depth int) any {
		n := 16
		if depth > 4 {
			n = 12
		}
		switch r.IntN(n) {
		case 0:
			return nil
		case 1:
			return r.IntN(2) == 0
		case 2, 3:
			return texts[r.IntN(len(texts))]
		case 4:
			return []int64{0, -1, math.MaxInt64, math.MinInt64, 42}[r.IntN(5)]
		case 5:
			return []float64{0, 1.5, -2.25e-7, 1e21, 1e300, 3, math.NaN(), math.Inf(-1)}[r.IntN(8)]
		case 6:
			return json.Number([]string{"1", "1.50", "-0", "1e400", "", "abc", "01"}[r.IntN(7)])
		case 7:
			return map[string]any{"sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "size": int64(r.IntN(1 << 20)), "filename": texts[r.IntN(len(texts))]}
		case 8:
			return int(r.IntN(100)) - 50
		case 9:
			return []any{time.Date(2026, 12, 3, 1, 2, 3, 4, time.UTC), []byte("x"), role("ADMIN"), int32(7)}[r.IntN(4)]
		case 10, 11:
			if r.IntN(10) == 0 {
				return []any(nil)
			}
			a := make([]any, r.IntN(4))
			for i := range a {
				a[i] = value(depth + 1)
			}
			return a
		default:
			m := map[string]any{}
			for range r.IntN(5) {
				m[texts[r.IntN(len(texts))]+"k"] = value(depth + 1)
			}
			return m
		}
	}
	fails := 0
	for range 20000 {
		args := map[string]any{}
		for range r.IntN(4) {
			args[texts[r.IntN(len(texts))]] = value(0)
		}
		name := texts[r.IntN(len(texts))]
		want, wantErr := oracleFingerprintJSON(name, args)
		got, err := fingerprintJSON(name, args)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("fingerprintJSON(%q, %#v)\n got %s, %v\nwant %s, %v", name, args, got, err, want, wantErr)
		}
		if err != nil {
			fails++
		}
	}
	if fails == 0 || fails > 10000 {
		t.Errorf("%d of 20000 argument sets failed: the generator no longer covers both outcomes", fails)
	}
}

// TestFingerprintGolden pins the fingerprint of a createTask call as the
// implementation before fingerprintJSON computed it.
func TestFingerprintGolden(t *testing.T) {
	got := fp(t, `mutation($in: CreateTaskInput!) { createTask(input: $in, idempotencyKey: "k") { id } }`,
		`{"in": {"projectId": "p1", "title": "<b>T</b> & \u2028 \ud800", "priority": "HIGH", "dueDate": "2026-01-02T03:04:05+02:00"}}`)
	const want = "9dd85787b95a5227f97593c63dbe2a833100fbe2bc90f0dabdc31fae1adb303c"
	if hex.EncodeToString([]byte(got)) != want {
		t.Errorf("fingerprint %x; want %s", got, want)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	doc, errs := gqlparser.LoadQuery(schema, `mutation($in: CreateTaskInput!) { createTask(input: $in, idempotencyKey: "k") { id } }`)
	if errs != nil {
		b.Fatal(errs)
	}
	raw := map[string]any{"in": map[string]any{"projectId": "5d0c6a1b-2f3e-4a9b-8c7d-1e2f3a4b5c6d", "title": "Write the report",
		"description": "Numbers of the week, and what they mean.", "priority": "HIGH", "dueDate": "2026-12-10T17:00:00Z"}}
	op := doc.Operations[0]
	vars, err := validator.VariableValues(schema, op, raw)
	if err != nil {
		b.Fatal(err)
	}
	field := op.SelectionSet[0].(*ast.Field)
	for _, c := range []struct {
		name string
		fn   func(*ast.Schema, *ast.Field, map[string]any) ([]byte, error)
	}{{"old", oracleFingerprint}, {"new", Fingerprint}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn(schema, field, vars); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
