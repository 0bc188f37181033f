package store

import (
	"fmt"
	"strings"

	"taskflow/audit"
	"taskflow/jsoncanon"
)

// auditRecordFields maps the columns of audit_events to the fields of
// audit.Record they hold. The insert of a unit of work, the sealer's read of
// the spine and the verification's walk all go through it, so that a field
// added to the record (and to the hash) is one line here.
var auditRecordFields = []struct {
	column, sqlType string
	field           func(r *audit.Record) any
}{
	{"id", "uuid", func(r *audit.Record) any { return &r.ID }},
	{"chain_key", "text", func(r *audit.Record) any { return &r.ChainKey }},
	{"workspace_id", "uuid", func(r *audit.Record) any { return &r.WorkspaceID }},
	{"actor_id", "uuid", func(r *audit.Record) any { return &r.ActorID }},
	{"action", "text", func(r *audit.Record) any { return &r.Action }},
	{"entity_type", "text", func(r *audit.Record) any { return &r.EntityType }},
	{"entity_id", "text", func(r *audit.Record) any { return &r.EntityID }},
	{"occurred_at", "timestamptz", func(r *audit.Record) any { return &r.OccurredAt }},
	{"ip", "text", func(r *audit.Record) any { return &r.IP }},
	{"user_agent", "text", func(r *audit.Record) any { return &r.UserAgent }},
	{"request_id", "text", func(r *audit.Record) any { return &r.RequestID }},
	{"metadata", "jsonb", func(r *audit.Record) any { return (*recordMetadata)(&r.Metadata) }},
	{"trace_id", "text", func(r *audit.Record) any { return &r.TraceID }},
}

// auditRecordColumns returns the columns of auditRecordFields, each prefixed
// with prefix (a table alias and a dot, or "").
func auditRecordColumns(prefix string) string {
	cols := make([]string, len(auditRecordFields))
	for i, f := range auditRecordFields {
		cols[i] = prefix + f.column
	}
	return strings.Join(cols, ", ")
}

// auditRecordRefs returns pointers to r's fields in the order of
// auditRecordColumns: the destinations of a scan, and the arguments of an
// insert (pgx follows the pointers; a nil *string is NULL).
func auditRecordRefs(r *audit.Record) []any {
	refs := make([]any, len(auditRecordFields))
	for i, f := range auditRecordFields {
		refs[i] = f.field(r)
	}
	return refs
}

// auditRecordArgs is auditRecordRefs as the arguments of an insert: a
// nullable field goes as its *string, not as a pointer to it. pgx sends a
// string or *string argument of a uuid column as text at once; any other
// type (a **string) it first tries in the uuid's binary format, fails,
// builds the error and falls back to text (about 2% of createTask's server
// CPU, in a profile of 2026-12-02).
//
// The metadata goes as its JSON text, written by jsoncanon as json.Marshal
// writes it, which pgx sends to the jsonb parameter as it is; pgx marshaled
// the map with encoding/json's reflection (2.3% of createTask's server CPU,
// docs/decisions/2026-12-03-canonical-encoding.md). Metadata that jsoncanon
// does not handle, or nil metadata, goes as before.
func auditRecordArgs(r *audit.Record) []any {
	args := auditRecordRefs(r)
	for i, a := range args {
		switch a := a.(type) {
		case **string:
			args[i] = *a
		case *recordMetadata:
			if *a != nil {
				if b, ok := jsoncanon.Append(nil, map[string]any(*a)); ok {
					args[i] = b
				}
			}
		}
	}
	return args
}

// auditRecordDests returns the scan destinations of the record columns of a
// row whose raw values are raw, those columns starting at raw[at]: r's fields,
// or nil (skip) for each of them when the record's id is NULL, as in a row of
// an outer join that found no event. present reports which.
func auditRecordDests(r *audit.Record, raw [][]byte, at int) (dests []any, present bool) {
	if len(raw) > at && raw[at] != nil {
		return auditRecordRefs(r), true
	}
	return make([]any, len(auditRecordFields)), false
}

// insertAuditSQL inserts one unchained event: tx_id and seq take their
// defaults (the inserting transaction's id, the next number), hash stays NULL
// until the sealer seals it. It is guarded: nothing is inserted in a unit of
// work that an idempotency claim refused (taskflow_ok, migration 0009).
var insertAuditSQL = func() string {
	marks := make([]string, len(auditRecordFields))
	for i, f := range auditRecordFields {
		marks[i] = fmt.Sprintf("$%d::%s", i+1, f.sqlType)
	}
	return `INSERT INTO audit_events (` + auditRecordColumns("") + `) SELECT ` + strings.Join(marks, ", ") +
		` WHERE taskflow_ok()`
}()

// recordMetadata is an audit.Record's metadata as a scan destination: the
// jsonb text decoded with numbers kept as written (audit.DecodeMetadata), so
// that it hashes as it did when it was appended.
type recordMetadata map[string]any

// Scan decodes the jsonb text.
func (m *recordMetadata) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("audit: metadata: unexpected %T", src)
	}
	out, err := audit.DecodeMetadata(b)
	if err != nil {
		return err
	}
	*m = out
	return nil
}
