package store

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestExtendedPictographicIsUnicodes checks extendedPictographic against
// emoji-data.txt (Unicode 15.1, in testdata as unicode.org publishes it):
// the code points it gives Extended_Pictographic, no other.
func TestExtendedPictographicIsUnicodes(t *testing.T) {
	t.Parallel()
	listed := map[rune]bool{}
	eachUnicodeDataLine(t, "emoji-data.txt", func(fields []string, line string) {
		if len(fields) < 2 || fields[1] != "Extended_Pictographic" {
			return
		}
		lo, hi, isRange := strings.Cut(fields[0], "..")
		if !isRange {
			hi = lo
		}
		first, err1 := strconv.ParseUint(lo, 16, 32)
		last, err2 := strconv.ParseUint(hi, 16, 32)
		if err1 != nil || err2 != nil || first > last {
			t.Fatalf("not a code point or a range: %q", line)
		}
		for r := rune(first); r <= rune(last); r++ {
			listed[r] = true
		}
	})
	if len(listed) != 3537 {
		t.Errorf("the file gives %d code points Extended_Pictographic, want 3537 (Unicode 15.1)", len(listed))
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		switch in := unicode.Is(extendedPictographic, r); {
		case in && !listed[r]:
			t.Errorf("U+%04X is in extendedPictographic, not in the file", r)
		case !in && listed[r]:
			t.Errorf("U+%04X is missing from extendedPictographic", r)
		}
	}
}
