package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// oracleCanonical is Canonical as it was before it wrote the record by hand
// (2026-12-03): canonicalValue's copy of the metadata and json.Marshal of
// the record. It and its helpers are kept here unchanged, so that a change to
// Canonical (or to canonicalJSON, its fallback) that changes a byte of any
// hash fails TestCanonicalMatchesOracle.
func oracleCanonical(r Record) ([]byte, error) {
	r.OccurredAt = r.OccurredAt.UTC().Truncate(time.Microsecond)
	meta, err := oracleCanonicalValue(map[string]any(r.Metadata))
	if err != nil {
		return nil, err
	}
	r.Metadata, _ = meta.(map[string]any)
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("audit: encode: %w", err)
	}
	return b, nil
}

func oracleCanonicalValue(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, string:
		return v, nil
	case json.Number:
		n, err := oracleCanonicalNumber(string(v))
		return json.Number(n), err
	case float64:
		n, err := oracleCanonicalNumber(strconv.FormatFloat(v, 'g', -1, 64))
		return json.Number(n), err
	case map[string]any:
		if v == nil {
			return map[string]any{}, nil
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			c, err := oracleCanonicalValue(e)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			c, err := oracleCanonicalValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("audit: canonical: unexpected %T in metadata", v)
}

func oracleCanonicalNumber(s string) (string, error) {
	bad := fmt.Errorf("audit: canonical: %q is not a JSON number", s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expPart := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expPart = s[:i], s[i+1:]
	}
	exp := 0
	if expPart != "" || len(mant) < len(s) {
		e, err := strconv.Atoi(strings.TrimPrefix(expPart, "+"))
		if err != nil {
			return "", bad
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if digits == "" {
		return "", bad
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", bad
		}
	}
	exp -= len(frac)
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	out := trimmed
	if neg {
		out = "-" + out
	}
	if exp != 0 {
		out += "e" + strconv.Itoa(exp)
	}
	return out, nil
}

// oracleDecodeMetadata is DecodeMetadata as it was: encoding/json's decoder.
func oracleDecodeMetadata(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	out := map[string]any{}
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("audit: decode metadata: %w", err)
	}
	return out, nil
}

// gen makes random records and metadata trees.
type gen struct{ r *rand.Rand }

// texts are strings that encodings differ on.
var texts = []string{
	"", "a", "task 42", "<b>&amp;</b>", "\u2028\u2029", "\x00", "\xff\xfe", "é😀", "\"\\/\b\f\n\r\t", "\x1f\x7f",
	"\xed\xa0\x80", "0b8f7d2e-4c1a-4e55-9a57-6f0c2d1e9b3a", "changes", "from", "to",
}

// numbers are number literals, canonical or not, and some that are not numbers.
var numbers = []string{
	"0", "-0", "1", "1.50", "15e-1", "1.5E0", "1e400", "-1e-400", "100", "1e2", "0.000", "007", "1.", ".5",
	"123456789012345678901234567890", "1e+5", "1e+-5", "1e++5", "-", "", "1e", "abc", "1e99999999999999999999",
	"1.5e-9223372036854775808", "0x10", " 1", "1_0",
}

func (g gen) text() string {
	if g.r.IntN(3) == 0 {
		var b []byte
		for range g.r.IntN(12) {
			b = append(b, byte(g.r.IntN(256)))
		}
		return string(b)
	}
	return texts[g.r.IntN(len(texts))]
}

func (g gen) value(depth int) any {
	n := 9
	if depth > 4 {
		n = 5
	}
	switch g.r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2, 3:
		return g.text()
	case 4:
		return json.Number(numbers[g.r.IntN(len(numbers))])
	case 5:
		fs := []float64{0, -0.0, 1.5, 1e21, 1e-7, 123.456, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.NaN()}
		return fs[g.r.IntN(len(fs))]
	case 6, 7:
		return g.object(depth + 1)
	default:
		if g.r.IntN(8) == 0 {
			return []any(nil)
		}
		a := make([]any, g.r.IntN(4))
		for i := range a {
			a[i] = g.value(depth + 1)
		}
		return a
	}
}

func (g gen) object(depth int) map[string]any {
	if g.r.IntN(10) == 0 {
		return nil
	}
	m := map[string]any{}
	for range g.r.IntN(6) {
		m[g.text()] = g.value(depth)
	}
	return m
}

// record fills every field of a Record by its type (a field of a type it does
// not know fails the test: appendCanonical and this test need it).
func (g gen) record(t *testing.T) Record {
	var r Record
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString(g.text())
		case *string:
			if g.r.IntN(3) > 0 {
				s := g.text()
				f.Set(reflect.ValueOf(&s))
			}
		case time.Time:
			at := time.Unix(g.r.Int64N(1<<34)-1<<33, g.r.Int64N(1e9))
			if g.r.IntN(2) == 0 {
				at = at.In(time.FixedZone("x", 3600*g.r.IntN(24)-43200))
			}
			if g.r.IntN(20) == 0 {
				at = time.Date(10000+g.r.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC) // Marshal fails
			}
			f.Set(reflect.ValueOf(at))
		case map[string]any:
			f.Set(reflect.ValueOf(g.object(0)))
		default:
			t.Fatalf("Record.%s is of type %s: teach appendCanonical and this test", v.Type().Field(i).Name, f.Type())
		}
	}
	return r
}

// TestCanonicalMatchesOracle compares Canonical with the oracle on random
// records: every field set or nil, metadata trees of strings that need
// escaping, numbers canonical and not, non-numbers, floats, NaN, nil maps and
// slices; the same bytes, or both fail.
func TestCanonicalMatchesOracle(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	var answered, failed int
	for i := range 20000 {
		r := g.record(t)
		if i%4 == 0 { // metadata as the store reads it back
			r.Metadata = decodedMetadata(r.Metadata)
		}
		want, wantErr := oracleCanonical(r)
		got, err := Canonical(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%#v)\n got %s, %v\nwant %s, %v", r, got, err, want, wantErr)
		}
		if _, ok := appendCanonical(nil, &r); ok {
			answered++
		}
		if err != nil {
			failed++
		}
	}
	// The comparison must cover both ways and both outcomes.
	if answered < 5000 || failed < 1000 || 20000-answered < 1000 {
		t.Errorf("of 20000 records, %d written by hand, %d failed: the generator no longer covers both", answered, failed)
	}
}

// decodedMetadata is m after a round trip through JSON, or m when that fails.
func decodedMetadata(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		return m
	}
	out, err := oracleDecodeMetadata(b)
	if err != nil {
		return m
	}
	return out
}

// FuzzCanonicalNumber compares appendCanonicalNumber with canonicalNumber on
// any text: the same number, or both refuse it.
func FuzzCanonicalNumber(f *testing.F) {
	for _, n := range numbers {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := oracleCanonicalNumber(s)
		got, ok := appendCanonicalNumber([]byte("x"), s)
		if ok != (err == nil) || ok && string(got) != "x"+want {
			t.Fatalf("appendCanonicalNumber(%q) = %q, %v; canonicalNumber: %q, %v", s, got, ok, want, err)
		}
	})
}

// FuzzCanonical compares Canonical with the oracle for a record whose
// strings and metadata come from the fuzzer: the metadata as the store reads
// it back from any JSON text, and the text as every string field.
func FuzzCanonical(f *testing.F) {
	f.Add(`{"a":1.50,"b":[15e-1,-0,1e400],"<":"\u2028"}`, "\xff<&>")
	f.Add(`{"nested":{"z":null,"a":[{},[]]},"a":"\ud800"}`, "")
	f.Fuzz(func(t *testing.T, metadata, s string) {
		meta, err := oracleDecodeMetadata([]byte(metadata))
		if err != nil {
			return
		}
		r := Record{ID: s, ChainKey: s, WorkspaceID: &s, Action: s, EntityType: s, EntityID: s, IP: &s, UserAgent: &s, RequestID: &s, TraceID: &s,
			OccurredAt: time.Date(2026, 12, 3, 8, 0, 0, 123456789, time.FixedZone("x", 3600)), Metadata: meta}
		want, wantErr := oracleCanonical(r)
		got, err := Canonical(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("Canonical\n got %s, %v\nwant %s, %v", got, err, want, wantErr)
		}
	})
}

// FuzzDecodeMetadata compares DecodeMetadata with the oracle on any text:
// the same map (reflect.DeepEqual), or both fail.
func FuzzDecodeMetadata(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `[1]`, ``, `{"a":1} x`, `{"a":"\ud800"}`, `{"a":1,"a":{"b":2}}`, "{\"\xff\":1.50}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := oracleDecodeMetadata(b)
		got, err := DecodeMetadata(b)
		if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeMetadata(%q) = %#v, %v; want %#v, %v", b, got, err, want, wantErr)
		}
		if err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("DecodeMetadata(%q) error %q; want %q", b, err, wantErr)
		}
	})
}

// benchRecord is a sealed task.created event as the sealer reads it.
func benchRecord() Record {
	s := func(v string) *string { return &v }
	meta, _ := oracleDecodeMetadata([]byte(benchMetadata))
	return Record{
		ID: "0b8f7d2e-4c1a-4e55-9a57-6f0c2d1e9b3a", ChainKey: "5d0c6a1b-2f3e-4a9b-8c7d-1e2f3a4b5c6d",
		WorkspaceID: s("5d0c6a1b-2f3e-4a9b-8c7d-1e2f3a4b5c6d"), ActorID: s("7e6d5c4b-3a2f-4e1d-9c8b-7a6f5e4d3c2b"),
		Action: "task.created", EntityType: "task", EntityID: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
		OccurredAt: time.Date(2026, 12, 3, 8, 0, 0, 123456000, time.UTC), IP: s("203.0.113.7"),
		UserAgent: s("Mozilla/5.0 (bench)"), RequestID: s("9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"), Metadata: meta,
	}
}

// benchMetadata is the jsonb text of a task's snapshot (bench/seal_test.go's).
const benchMetadata = `{"id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "title": "task 42", "status": "TODO", "dueDate": null, "priority": "MEDIUM", "projectId": "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e", "assigneeId": null, "createdById": "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f", "description": "words words words words words words words words words words words words words words words words words words words words ", "estimate": 1.50}`

func BenchmarkCanonical(b *testing.B) {
	r := benchRecord()
	for _, c := range []struct {
		name string
		fn   func(Record) ([]byte, error)
	}{{"old", oracleCanonical}, {"new", Canonical}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeMetadata(b *testing.B) {
	text := []byte(benchMetadata)
	for _, c := range []struct {
		name string
		fn   func([]byte) (map[string]any, error)
	}{{"old", oracleDecodeMetadata}, {"new", DecodeMetadata}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn(text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
