package store_test

import (
	"strings"
	"testing"

	"taskflow/store"
)

// CleanFilename keeps the last element of the name, without control
// characters, bidirectional controls (which can disguise an extension:
// "invoice\u202Efdp.exe" reads as "invoiceexe.pdf"), invalid UTF-8, cut to
// 255 bytes on a character boundary.
func TestCleanFilename(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`C:\fakepath\shot.png`:           "shot.png",
		"../../etc/passwd":               "passwd",
		"a\x00b\x1fc\x7f.txt":            "abc.txt",
		"invoice\u202Efdp.exe":           "invoicefdp.exe",
		"\u2066report\u2069\u200F.pdf":   "report.pdf",
		"\u061Cdoc\u202A\u202B\u202C.md": "doc.md",
		"  ..  ":                         "file",
		"bad\xffutf8.txt":                "badutf8.txt",
		"e\u0301.txt":                    "\u00e9.txt",
		strings.Repeat("é", 200):         strings.Repeat("é", 127),
	} {
		if got := store.CleanFilename(in); got != want {
			t.Errorf("CleanFilename(%q) = %q, want %q", in, got, want)
		}
	}
}
