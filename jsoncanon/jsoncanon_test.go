package jsoncanon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// seeds are JSON texts (and texts that are not JSON) for both fuzzers:
// HTML characters, U+2028 and U+2029, invalid UTF-8, NUL, surrogate escapes
// (a pair, lone, reversed, truncated), duplicate keys, deep nesting, big and
// odd numbers, empty containers, data after the object, null and other
// top-level values.
var seeds = []string{
	`{}`,
	` {"a":1} `,
	`{"<script>":"</script> & more > less"}`,
	"{\"ls\":\"a\u2028b\u2029c\"}",
	"{\"bad\":\"\xff\xfe ok \xc3\x28 \xed\xa0\x80\"}",
	"{\"bad\xff\":1}",
	`{"nul":"a\u0000b","\u0000":null}`,
	"{\"nul\":\"a\x00b\"}",
	`{"pair":"\ud83d\ude00","lone":"\ud800","low":"\udc00x","rev":"\ude00\ud83d","cut":"\ud83d\u00e9","esc":"\"\\\/\b\f\n\r\t\u0041"}`,
	`{"bad":"\ud83d\u12"}`,
	`{"bad":"\x"}`,
	`{"a":1,"a":2,"b":{"x":1},"b":{"y":2}}`,
	`{"d":` + strings.Repeat(`[`, 1100) + strings.Repeat(`]`, 1100) + `}`,
	`{"d":` + strings.Repeat(`{"a":`, 50) + `[]` + strings.Repeat(`}`, 50) + `}`,
	`{"n":[1e400,-0,1.50,15e-1,0.0,-0.0e-0,1E+2,123456789012345678901234567890,5e-324,-1.7976931348623157e308]}`,
	`{"n":[01]}`, `{"n":[1.]}`, `{"n":[.5]}`, `{"n":[-]}`, `{"n":[1e]}`, `{"n":[+1]}`, `{"n":1x}`,
	`{"e":{},"a":[],"s":"","t":true,"f":false,"z":null}`,
	`{"a":1} trailing`, `{"a":1}{"b":2}`, `{"a":1}]`, "{\"a\":1}\xff",
	`null`, ` null `, `[1,2]`, `"s"`, `1`, `true`, ``, ` `, `{`, `{"a"`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a" 1}`,
	"{\"ctl\":\"a\tb\"}", `{"a":[1,,2]}`, `{"a":tru}`, `{"a":nulll}`, "{\"a\":\"\\\xff\"}",
	"\t\r\n{\"ws\" : [ 1 , { } ] }",
}

// FuzzDecodeObject compares DecodeObject with json.Decoder.UseNumber on any
// text: when it answers, the map is the decoder's (reflect.DeepEqual), and it
// never answers where the decoder fails.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := DecodeObject(b)
		if copied, copiedOK := (Decoder{Copy: true}).DecodeObject(b); copiedOK != ok || !reflect.DeepEqual(copied, got) {
			t.Fatalf("Decoder{Copy: true}.DecodeObject(%.500q) = %.500v %v; DecodeObject %.500v %v", b, copied, copiedOK, got, ok)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		want := map[string]any{}
		err := dec.Decode(&want)
		if !ok {
			if err == nil && want != nil && plainObject(b) {
				t.Errorf("DecodeObject(%.500q) fell back on an object the decoder reads: %.500v", b, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeObject(%.500q) = %.500v; the decoder fails: %v", b, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeObject(%.500q)\n got %.500s\nwant %.500s", b, fmt.Sprintf("%#v", got), fmt.Sprintf("%#v", want))
		}
	})
}

// TestDecodeFields checks that DecodeFields gives an object's members in
// the order written, duplicates included, with DecodeObject's values, and
// declines a document with anything but white space after the object.
func TestDecodeFields(t *testing.T) {
	type member struct {
		k string
		v any
	}
	var got []member
	ok := DecodeFields([]byte(" {\"b\":1,\"a\":{\"x\":[true,null]},\"b\":\"s\\u00e9\"}\n\t"), func(k string, v any) {
		got = append(got, member{k, v})
	})
	want := []member{{"b", json.Number("1")}, {"a", map[string]any{"x": []any{true, nil}}}, {"b", "sé"}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeFields: %v %#v, want %#v", ok, got, want)
	}
	for _, s := range []string{`{"a":1} {}`, `{"a":1}x`, `{"a":1`, `[]`, ` null`, `{"a":1}` + "\u00a0"} {
		if DecodeFields([]byte(s), func(string, any) {}) {
			t.Errorf("DecodeFields(%q) read it; it must decline", s)
		}
	}
}

// With Copy, what a decoder gives keeps none of the text: 64 objects of 1
// MiB, each with a key, a string and a number kept (in an object, in an
// array, as a member DecodeFields gives), hold a few bytes each, not the
// 64 MiB (twice over) they hold without Copy.
func TestDecoderCopy(t *testing.T) {
	pad := strings.Repeat(" ", 1<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var kept []any
	for i := range 64 {
		b := []byte(fmt.Sprintf(`{"o":{"k%d":"s%d"},"a":[%d],"f":"t%d"}%s`, i, i, i, i, pad))
		m, ok := Decoder{Copy: true}.DecodeObject(b)
		if !ok {
			t.Fatalf("DecodeObject(%.100q) declined", b)
		}
		for k, v := range m["o"].(map[string]any) {
			kept = append(kept, k, v)
		}
		kept = append(kept, m["a"].([]any)[0])
		if !(Decoder{Copy: true}).DecodeFields(b, func(k string, v any) {
			if k == "f" {
				kept = append(kept, k, v)
			}
		}) {
			t.Fatalf("DecodeFields(%.100q) declined", b)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Errorf("64 decoded keys, strings and numbers hold %d MiB of the heap: they keep their texts", grew>>20)
	}
	runtime.KeepAlive(kept)
}

// plainObject reports whether b is an object that DecodeObject must decode
// itself: one not nested deeper than 1000.
func plainObject(b []byte) bool {
	depth, most := 0, 0
	for _, c := range b {
		switch c {
		case '{', '[':
			depth++
			most = max(most, depth)
		case '}', ']':
			depth--
		}
	}
	return most < maxDepth && bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
}

// FuzzAppend compares Append with json.Marshal on the values that decoding
// any JSON text gives (with and without UseNumber), on every string as a
// value and a key, and on a json.Number and a float64 made of the text:
// the same bytes, and no answer where Marshal fails.
func FuzzAppend(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var values []any
		for _, useNumber := range []bool{false, true} {
			dec := json.NewDecoder(strings.NewReader(s))
			if useNumber {
				dec.UseNumber()
			}
			var v any
			if dec.Decode(&v) == nil {
				values = append(values, v)
			}
		}
		values = append(values, s, map[string]any{s: s, "k": []any{s, nil}}, json.Number(s), []any{json.Number(s)})
		if len(s) >= 8 {
			bits := uint64(0)
			for i := range 8 {
				bits = bits<<8 | uint64(s[i])
			}
			values = append(values, math.Float64frombits(bits), []any{math.Float64frombits(bits)})
		}
		for _, v := range values {
			checkAppend(t, v)
		}
	})
}

// checkAppend fails t unless Append(v) is json.Marshal(v), or Append
// declines and Marshal fails.
func checkAppend(t *testing.T, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	got, ok := Append([]byte("prefix"), v)
	switch {
	case !ok && err != nil:
	case !ok:
		if depth(v) <= maxDepth {
			t.Errorf("Append(%.500s) declined; Marshal: %.500s", fmt.Sprintf("%#v", v), want)
		}
	case err != nil:
		t.Errorf("Append(%.500s) = %.500s; Marshal fails: %v", fmt.Sprintf("%#v", v), got, err)
	case !bytes.Equal(got, append([]byte("prefix"), want...)):
		t.Errorf("Append(%.500s)\n got %.500s\nwant prefix%.500s", fmt.Sprintf("%#v", v), got, want)
	}
}

// depth returns how deep maps and slices nest in v.
func depth(v any) int {
	most := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			most = max(most, depth(e))
		}
		return most + 1
	case []any:
		for _, e := range v {
			most = max(most, depth(e))
		}
		return most + 1
	}
	return 0
}

// TestAppendTypes covers the types that decoding never gives: integers, nil
// containers, and the types Append declines (encoding/json then answers).
func TestAppendTypes(t *testing.T) {
	for _, v := range []any{
		int(-7), int64(math.MinInt64), int32(5), int16(-3), int8(8), uint(9), uint64(math.MaxUint64), uint32(1), uint16(2), uint8(3),
		map[string]any(nil), []any(nil), map[string]any{"a": []any(nil), "b": map[string]any(nil)},
		json.Number(""), json.Number("0x1"), json.Number(" 1"), 0.000001, 1e-7, 1e21, 1e20, -0.0, 123456789.125, math.Inf(1), math.NaN(),
	} {
		checkAppend(t, v)
	}
	for _, v := range []any{[]string{"a"}, map[string]string{}, struct{}{}, &[]any{}, float32(1)} {
		if _, ok := Append(nil, v); ok {
			t.Errorf("Append(%#v) answered; it should leave it to encoding/json", v)
		}
	}
	deep := any(nil)
	for range maxDepth + 1 {
		deep = []any{deep}
	}
	if _, ok := Append(nil, deep); ok {
		t.Errorf("Append of %d nested arrays answered", maxDepth+1)
	}
	cycle := map[string]any{}
	cycle["self"] = cycle
	if _, ok := Append(nil, cycle); ok {
		t.Error("Append of a cycle answered")
	}
}

// TestEncoderOptions checks EmptyNil and Number: nil containers as empty
// ones, numbers through the function, integers declined.
func TestEncoderOptions(t *testing.T) {
	var seen []string
	e := Encoder{EmptyNil: true, Number: func(dst []byte, lit string) ([]byte, bool) {
		seen = append(seen, lit)
		return append(dst, 'N'), lit != "bad"
	}}
	got, ok := e.Append(nil, map[string]any{"m": map[string]any(nil), "s": []any(nil), "n": json.Number("1.50"), "f": 0.1})
	if !ok || string(got) != `{"f":N,"m":{},"n":N,"s":[]}` || strings.Join(seen, " ") != "0.1 1.50" {
		t.Errorf("got %s %v, seen %q", got, ok, seen)
	}
	for _, v := range []any{json.Number("bad"), int64(1), []any{1}} {
		if _, ok := e.Append(nil, v); ok {
			t.Errorf("Encoder with Number answered for %#v", v)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	v := sampleMetadata()
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = Append(buf[:0], v)
		}
	})
}

func BenchmarkDecodeObject(b *testing.B) {
	text, _ := json.Marshal(sampleMetadata())
	b.Run("json.Decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.UseNumber()
			m := map[string]any{}
			if err := dec.Decode(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeObject", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := DecodeObject(text); !ok {
				b.Fatal("declined")
			}
		}
	})
}

// sampleMetadata is a task's snapshot as the audit log records it.
func sampleMetadata() map[string]any {
	return map[string]any{
		"id": "0b8f7d2e-4c1a-4e55-9a57-6f0c2d1e9b3a", "projectId": "5d0c6a1b-2f3e-4a9b-8c7d-1e2f3a4b5c6d",
		"title": "task 42", "description": strings.Repeat("words ", 20), "status": "TODO", "priority": "MEDIUM",
		"assigneeId": nil, "dueDate": nil, "createdById": "7e6d5c4b-3a2f-4e1d-9c8b-7a6f5e4d3c2b", "estimate": json.Number("1.5"),
	}
}
