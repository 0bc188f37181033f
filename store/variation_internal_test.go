package store

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestEmojiVariationBasesAreUnicodes checks emojiVariationBases against
// emoji-variation-sequences.txt (Unicode 15.1, in testdata as unicode.org
// publishes it): the characters it gives a text and an emoji style, no
// other, each with both.
func TestEmojiVariationBasesAreUnicodes(t *testing.T) {
	t.Parallel()
	styles := map[rune]map[rune]bool{}
	eachUnicodeDataLine(t, "emoji-variation-sequences.txt", func(fields []string, line string) {
		cps := strings.Fields(fields[0])
		if len(cps) != 2 {
			t.Fatalf("not a sequence of two code points: %q", line)
		}
		var rs [2]rune
		for i, cp := range cps {
			n, err := strconv.ParseUint(cp, 16, 32)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			rs[i] = rune(n)
		}
		if styles[rs[0]] == nil {
			styles[rs[0]] = map[rune]bool{}
		}
		styles[rs[0]][rs[1]] = true
	})
	if len(styles) != 371 {
		t.Errorf("the file gives %d characters a variation, want 371 (Unicode 15.1)", len(styles))
	}
	for r, s := range styles {
		if len(s) != 2 || !s['\uFE0E'] || !s['\uFE0F'] {
			t.Errorf("U+%04X has the styles %v, want U+FE0E and U+FE0F", r, s)
		}
		if !unicode.Is(emojiVariationBases, r) {
			t.Errorf("U+%04X is missing from emojiVariationBases", r)
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.Is(emojiVariationBases, r) && styles[r] == nil {
			t.Errorf("U+%04X is in emojiVariationBases, not in the file", r)
		}
	}
}
