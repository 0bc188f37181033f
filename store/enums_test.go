package store_test

import (
	"bytes"
	"testing"

	"taskflow/store"
)

// A status or priority read from the database is the value stored (a known
// one is its constant), never an alias of pgx's buffer, and NULL is refused;
// written for GraphQL, any value is a quoted, escaped string.
func TestTaskEnumsScanAndMarshal(t *testing.T) {
	var s store.TaskStatus
	for _, v := range []store.TaskStatus{store.TaskStatusTodo, store.TaskStatusInProgress, store.TaskStatusDone, "odd"} {
		src := []byte(v)
		if err := s.ScanBytes(src); err != nil || s != v {
			t.Fatalf("scan %q: %q, %v", v, s, err)
		}
		copy(src, "XXXXXXXXXXXXXXXX")
		if s != v {
			t.Fatalf("scan %q: %q shares the buffer", v, s)
		}
	}
	var p store.TaskPriority
	for _, v := range []store.TaskPriority{store.TaskPriorityLow, store.TaskPriorityMedium, store.TaskPriorityHigh, store.TaskPriorityUrgent, "odd"} {
		if err := p.ScanBytes([]byte(v)); err != nil || p != v {
			t.Fatalf("scan %q: %q, %v", v, p, err)
		}
	}
	if s.ScanBytes(nil) == nil || p.ScanBytes(nil) == nil {
		t.Fatal("NULL scanned")
	}
	for v, want := range map[store.TaskStatus]string{
		store.TaskStatusInProgress: `"IN_PROGRESS"`,
		`a"b\`:                     `"a\"b\\"`,
	} {
		var b bytes.Buffer
		v.MarshalGQL(&b)
		if b.String() != want {
			t.Errorf("%q written as %s, want %s", v, b.String(), want)
		}
	}
	var b bytes.Buffer
	store.TaskPriorityUrgent.MarshalGQL(&b)
	if b.String() != `"URGENT"` {
		t.Errorf("URGENT written as %s", b.String())
	}
}
