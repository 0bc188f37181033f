package store

import (
	"bytes"
	"encoding/json"
	"testing"

	"taskflow/audit"
)

// TestAuditRecordArgsMetadata checks the insert's metadata argument: the
// JSON text json.Marshal writes of the metadata, or the metadata as before
// (pgx marshals it) when it is nil or holds a type jsoncanon leaves to
// encoding/json.
func TestAuditRecordArgsMetadata(t *testing.T) {
	at := -1
	for i, f := range auditRecordFields {
		if f.column == "metadata" {
			at = i
		}
	}
	for _, meta := range []map[string]any{
		{},
		{"title": "<b>T</b> & \u2028", "n": json.Number("1.50"), "f": 1e21, "nested": map[string]any{"a": []any{nil, true}}, "bad": "\xff"},
	} {
		r := audit.Record{Metadata: meta}
		got, ok := auditRecordArgs(&r)[at].([]byte)
		want, err := json.Marshal(meta)
		if !ok || err != nil || !bytes.Equal(got, want) {
			t.Errorf("metadata argument %s (%v); want %s (%v)", got, ok, want, err)
		}
	}
	for _, meta := range []map[string]any{nil, {"strings": []string{"a"}}} {
		r := audit.Record{Metadata: meta}
		if got, ok := auditRecordArgs(&r)[at].(*recordMetadata); !ok || got != (*recordMetadata)(&r.Metadata) {
			t.Errorf("metadata argument of %#v: %#v; want the *recordMetadata", meta, auditRecordArgs(&r)[at])
		}
	}
}
