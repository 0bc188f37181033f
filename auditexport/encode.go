// Package auditexport writes audit events as exported files (NDJSON, CSV),
// for GET /audit/export and for asynchronous exports (startAuditExport),
// whose River jobs it works: each writes its export's file to the blob store,
// and a periodic job deletes the files of exports past their expiry.
package auditexport

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	"taskflow/store"
)

// Columns are the CSV columns of an audit export, in order. A new column
// goes at the end (docs/api.md), so that readers that take columns by their
// place go on working.
var Columns = []string{"id", "occurredAt", "workspaceId", "actorId", "action", "entityType",
	"entityId", "ip", "userAgent", "requestId", "metadata", "sealed", "chainPosition", "prevHash", "hash", "traceId", "sealedAt"}

// Encoder writes audit events to a file in one format.
type Encoder interface {
	// Write writes one event.
	Write(e *store.AuditEvent) error
	// Flush writes what the encoder buffers and returns the first error of
	// a write so far.
	Flush() error
}

// NewEncoder returns the encoder of format ("ndjson" or "csv", in any case;
// anything else is ndjson) writing to w. A CSV encoder writes its header
// line (Columns) first.
func NewEncoder(w io.Writer, format string) Encoder {
	if strings.EqualFold(format, "csv") {
		cw := csv.NewWriter(w)
		_ = cw.Write(Columns)
		return &csvEncoder{w: cw}
	}
	return &ndjsonEncoder{enc: json.NewEncoder(w)}
}

// ndjsonEncoder writes one JSON object per line, with the fields of
// AuditEvent (sealed, chainPosition, prevHash, hash and sealedAt included:
// examples/auditverify checks the chain from them).
type ndjsonEncoder struct {
	enc *json.Encoder
}

func (x *ndjsonEncoder) Write(e *store.AuditEvent) error { return x.enc.Encode(e) }

func (x *ndjsonEncoder) Flush() error { return nil }

// csvEncoder writes Columns; metadata is a JSON object in one cell.
type csvEncoder struct {
	w *csv.Writer
}

func (x *csvEncoder) Write(e *store.AuditEvent) error {
	meta, err := json.Marshal(e.Metadata)
	if err != nil {
		return err
	}
	pos := ""
	if e.ChainPosition != nil {
		pos = strconv.FormatInt(*e.ChainPosition, 10)
	}
	sealedAt := ""
	if e.SealedAt != nil {
		sealedAt = e.SealedAt.UTC().Format(time.RFC3339Nano)
	}
	return x.w.Write([]string{e.ID, e.OccurredAt.UTC().Format(time.RFC3339Nano), str(e.WorkspaceID), str(e.ActorID),
		e.Action, e.EntityType, csvCell(e.EntityID), csvCell(str(e.IP)), csvCell(str(e.UserAgent)),
		csvCell(str(e.RequestID)), string(meta), strconv.FormatBool(e.Sealed), pos, str(e.PrevHash), str(e.Hash), str(e.TraceID),
		sealedAt})
}

func (x *csvEncoder) Flush() error {
	x.w.Flush()
	return x.w.Error()
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// csvCell defuses a client-supplied value that a spreadsheet would run as a
// formula (=, +, -, @, tab, CR first) by prefixing a single quote, as OWASP
// recommends for CSV exports.
func csvCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
