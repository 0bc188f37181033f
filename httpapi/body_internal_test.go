package httpapi

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodeBody checks that decodeBody decodes every body as decodeObject
// does with encoding/json: the same fields, or an error for both. The seeds
// are the bodies where a hand-written reader could part from encoding/json:
// member names in other cases, duplicates (a second variables object merges
// into the first), nulls, values of the wrong type, trailing data and
// white space encoding/json's caller trims.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"query":"query($id: ID!) { task(id: $id) { id } }","variables":{"id":"7b0c"}}`,
		`{"query":"{ me { id } }","operationName":null,"variables":null,"extensions":null}`,
		`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}},"variables":{"n":1.50}}`,
		`{"QUERY":"{ a }","Variables":{"a":1},"OPERATIONNAME":"x"}`,
		`{"query":"{ a }","Query":"{ b }"}`,
		`{"query":"{ a }","query":null}`,
		`{"variables":{"a":1,"b":2},"variables":{"b":3,"c":[]}}`,
		`{"variables":{"a":1},"variables":null,"variables":{"c":3}}`,
		`{"variables":[1]}`,
		`{"query":5}`,
		`{"operationName":{"a":1}}`,
		`{"extensions":"x"}`,
		`{"query":"{ a }"} {"query":"{ b }"}`,
		`{"query":"{ a }"} x`,
		"\u00a0{\"query\":\"{ a }\"}\u00a0",
		" \t\r\n{\"query\":\"{ a }\"}\n",
		`{"quer\u0079":"{ a }","\u0076ariables":{"k\u00e9":"\ud83d\ude00"}}`,
		`{"query":"\ud800"}`,
		`{"ſuery":"{ a }"}`,
		`{"unknown":{"deep":[[[{}]]]},"query":"{ a }"}`,
		`{}`, `[]`, `null`, `"x"`, ``, `{`, `{"query":}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := decodeBody(body)
		var want postBody
		wantErr := decodeObject(string(body), &want)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%q: decodeBody error %v, encoding/json's %v", body, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ndecodeBody    %#v\nencoding/json %#v", body, got, want)
		}
	})
}

// BenchmarkDecodeBody compares decodeBody with encoding/json on the body of
// a read by id (the task scenario of bench/load).
func BenchmarkDecodeBody(b *testing.B) {
	body := []byte(`{"query":"query($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }","variables":{"id":"0193f1a2-7c1e-7d3a-9b1f-2c4d5e6f7a8b"}}`)
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p postBody
			if err := decodeObject(string(body), &p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeBody(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A decoded query is a string of its own: the document caches keep it and
// weigh it by its length, so it must not hold on to the rest of the body
// (jsoncanon's strings share one copy of it). 64 bodies of 1 MiB with a
// query of a few bytes, their queries kept: the heap grows by the queries,
// not by 64 MiB.
func TestDecodedQueryDoesNotHoldTheBody(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	HeapHeld(t, 8<<20, "64 queries and names decoded from bodies of 1 MiB", func() any {
		kept := make([]*string, 0, 64)
		for i := range 64 {
			b, err := decodeBody([]byte(`{"query":"{ me { id } }","operationName":"q` + strconv.Itoa(i) + `","variables":{"pad":"` + big + `"}}`))
			if err != nil || b.Query == nil {
				t.Fatalf("decodeBody: %v", err)
			}
			kept = append(kept, b.Query, b.OperationName)
		}
		return kept
	})
}
