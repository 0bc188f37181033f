package store

import (
	"testing"

	"taskflow/audit"
)

// reportedRows remembers the rows reported, up to maxReportedRows; past
// them it remembers no new one, and one not remembered is reported at each
// read (never left unreported), while those remembered stay so.
func TestReportedRowsIsBounded(t *testing.T) {
	var r reportedRows
	row := func(pos int64) *AuditCheckpoint {
		return &AuditCheckpoint{Checkpoint: audit.Checkpoint{ChainKey: "chain", Position: pos, KeyID: "key"}}
	}
	for pos := int64(1); pos <= maxReportedRows; pos++ {
		if !r.first(row(pos)) {
			t.Fatalf("row %d reported before", pos)
		}
	}
	if r.first(row(1)) || r.first(row(maxReportedRows)) {
		t.Error("a row remembered was reported again")
	}
	past := row(maxReportedRows + 1)
	if !r.first(past) || !r.first(past) {
		t.Error("a row past the bound was not reported at each read")
	}
	if len(r.rows) != maxReportedRows {
		t.Errorf("%d rows remembered, want %d", len(r.rows), maxReportedRows)
	}
	// Another row at a remembered key (planted again) is another.
	again := row(1)
	again.Signature = "another"
	if !r.first(again) {
		t.Error("another row at a remembered key was not reported")
	}
}
