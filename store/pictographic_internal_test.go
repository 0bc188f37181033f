package store

import (
	"bufio"
	"os"
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
	f, err := os.Open("testdata/emoji-data.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[rune]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		cps, prop, ok := strings.Cut(line, ";")
		if !ok || strings.TrimSpace(prop) != "Extended_Pictographic" {
			continue
		}
		lo, hi, isRange := strings.Cut(strings.TrimSpace(cps), "..")
		if !isRange {
			hi = lo
		}
		first, err1 := strconv.ParseUint(lo, 16, 32)
		last, err2 := strconv.ParseUint(hi, 16, 32)
		if err1 != nil || err2 != nil || first > last {
			t.Fatalf("not a code point or a range: %q", sc.Text())
		}
		for r := rune(first); r <= rune(last); r++ {
			listed[r] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
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
