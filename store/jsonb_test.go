package store

import (
	"bytes"
	"encoding/json"
	"testing"
)

// jsonbSamples are JSON texts in the shape jsonb writes them, with the cases
// that matter: spaces inside strings, escaped quotes and backslashes, nesting,
// empty containers, unicode.
var jsonbSamples = []string{
	`{}`, `[]`, `null`, `"a b"`, `1.5e10`,
	`{"a": 1, "b": [1, 2, {"c": null}], "d": "x, y: z"}`,
	`{"changes": {"title": {"to": "New \"quoted\" title", "from": "a\\"}}}`,
	`{"s": "\\", "t": "\"", "u": "\u00e9 \u2028 é", "e": [], "o": {}}`,
	`{"title": "Ship it", "status": "TODO", "dueDate": "2026-12-02T03:59:12.123456Z", "assigneeId": null, "priority": "HIGH"}`,
	` { "a" : [ 1 , 2 ] } `,
}

func FuzzCompactJSONB(f *testing.F) {
	for _, s := range jsonbSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if !json.Valid(src) {
			return // Postgres stores only valid JSON
		}
		var want bytes.Buffer
		if err := json.Compact(&want, src); err != nil {
			t.Fatal(err)
		}
		if got := compactJSONB(nil, src); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("compactJSONB(%q) = %q, want %q", src, got, want.Bytes())
		}
	})
}

// A task's snapshot, as jsonb writes it: the metadata of a task.created or
// task.deleted event.
var benchMetadata = []byte(`{"id": "01a23520-50f5-7eef-88e1-f3de8e2a20d2", "title": "Write the quarterly report", "status": "TODO", ` +
	`"dueDate": null, "priority": "MEDIUM", "projectId": "01a23520-4fc4-756b-903c-7a1961ca8a0b", "assigneeId": null, ` +
	`"description": "Numbers, charts, and a summary: one page.", "workspaceId": "01a23520-4f93-77b3-98e8-0bccaba91a63"}`)

func BenchmarkCompactJSONB(b *testing.B) {
	b.Run("json.Compact", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := json.Compact(&buf, benchMetadata); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compactJSONB", func(b *testing.B) {
		var dst []byte
		for b.Loop() {
			dst = compactJSONB(dst[:0], benchMetadata)
		}
	})
}
