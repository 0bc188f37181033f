package store

import (
	"bufio"
	"os"
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
	f, err := os.Open("testdata/emoji-variation-sequences.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	styles := map[rune]map[rune]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		seq, _, ok := strings.Cut(line, ";")
		if !ok {
			continue
		}
		cps := strings.Fields(seq)
		if len(cps) != 2 {
			t.Fatalf("not a sequence of two code points: %q", sc.Text())
		}
		var rs [2]rune
		for i, cp := range cps {
			n, err := strconv.ParseUint(cp, 16, 32)
			if err != nil {
				t.Fatalf("%q: %v", sc.Text(), err)
			}
			rs[i] = rune(n)
		}
		if styles[rs[0]] == nil {
			styles[rs[0]] = map[rune]bool{}
		}
		styles[rs[0]][rs[1]] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
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
