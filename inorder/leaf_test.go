package inorder_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/99designs/gqlgen/graphql"

	"taskflow/inorder"
)

// status is an enum as gqlgen binds one: a string type whose MarshalGQL
// writes it quoted (without an allocation of its own, as store's enums).
type status string

func (s status) MarshalGQL(w io.Writer) {
	io.WriteString(w, `"`)
	io.WriteString(w, string(s))
	io.WriteString(w, `"`)
}

// String writes what graphql.MarshalString writes (which is never null, so
// the rewritten fields answer as gqlgen's), and Value what the value's own
// MarshalGQL writes, both when written: after a change of the value they
// point to, they write the new one.
func TestLeafMarshalersWriteAsGqlgen(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `"quoted" \back\`, "tab\tnew\nline\x00\x1f", "é 😀 \u2028", "\xff\xfe"} {
		if graphql.MarshalString(s) == graphql.Null {
			t.Fatalf("graphql.MarshalString(%q) is null: String's fields would answer otherwise than gqlgen's", s)
		}
		var want, got bytes.Buffer
		graphql.MarshalString(s).MarshalGQL(&want)
		inorder.String(&s).MarshalGQL(&got)
		if got.String() != want.String() {
			t.Errorf("String(%q) wrote %s, MarshalString %s", s, got.String(), want.String())
		}
	}
	st := status("TODO")
	m := inorder.Value(&st)
	st = "DONE"
	var got bytes.Buffer
	m.MarshalGQL(&got)
	if got.String() != `"DONE"` {
		t.Errorf("Value wrote %s, want \"DONE\"", got.String())
	}
}

// String and Value make no allocation, neither when made nor when written;
// graphql.MarshalString makes one (what String saves).
func TestLeafMarshalersAllocateNothing(t *testing.T) {
	var buf bytes.Buffer
	buf.Grow(1 << 16)
	obj := &struct {
		Title  string
		Status status
	}{"a title", "TODO"}
	var m graphql.Marshaler
	for name, f := range map[string]func(){
		"String":       func() { m = inorder.String(&obj.Title) },
		"String write": func() { buf.Reset(); inorder.String(&obj.Title).MarshalGQL(&buf) },
		"Value":        func() { m = inorder.Value(&obj.Status) },
		"Value write":  func() { buf.Reset(); inorder.Value(&obj.Status).MarshalGQL(&buf) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m = graphql.MarshalString(obj.Title) }); n != 1 {
		t.Errorf("graphql.MarshalString: %v allocations, want 1 (the test no longer measures what String saves)", n)
	}
	_ = m
}
