package store

import (
	"strings"
	"testing"
	"time"

	"taskflow/errs"

	"github.com/google/uuid"
)

// FuzzDecodeCursor feeds arbitrary strings to the cursor decoder: it never
// panics, refuses with BAD_USER_INPUT only, accepts only cursors of its own list
// with a real id and time, and what it accepts encodes back to a cursor that
// decodes to the same position.
func FuzzDecodeCursor(f *testing.F) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	id := "6f1c1f3e-6a4c-4d0e-9a6e-0c2f5b8f9d11"
	f.Add(encodeCursor(at, id, "project:1"), "project:1")
	f.Add(encodeCursor(at, id, "project:1"), "project:2")
	f.Add(encodeCursor(at, id, ""), "")
	f.Add("", "x")
	f.Add("not base64!", "x")
	f.Add("e30", "")                                              // {}
	f.Add("eyJ0IjoiMjAyNi0xMS0zMFQwMTowMjowM1oiLCJpIjoieCJ9", "") // bad id
	f.Add("bnVsbA", "")                                           // null
	f.Fuzz(func(t *testing.T, after, scope string) {
		c, err := decodeCursor(&after, scope)
		if err != nil {
			if errs.CodeOf(err) != errs.CodeBadUserInput {
				t.Fatalf("%q: error %v is not BAD_USER_INPUT", after, err)
			}
			if c != nil {
				t.Fatalf("%q: a cursor and an error", after)
			}
			return
		}
		if c == nil {
			if after != "" {
				t.Fatalf("%q: neither a cursor nor an error", after)
			}
			return
		}
		if c.Scope != scope || c.At.IsZero() {
			t.Fatalf("%q accepted for scope %q as %+v", after, scope, c)
		}
		if _, err := uuid.Parse(c.ID); err != nil {
			t.Fatalf("%q accepted with id %q", after, c.ID)
		}
		again := encodeCursor(c.At, c.ID, scope)
		c2, err := decodeCursor(&again, scope)
		if err != nil || !c2.At.Equal(c.At) || c2.ID != c.ID {
			t.Fatalf("%q: re-encoded %q decodes to %+v, %v; want %+v", after, again, c2, err, c)
		}
		if other := scope + "?"; !strings.EqualFold(other, scope) {
			if _, err := decodeCursor(&again, other); err == nil {
				t.Fatalf("%q: accepted by another list %q", again, other)
			}
		}
	})
}
