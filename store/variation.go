package store

import (
	"unicode"
	"unicode/utf8"
)

// blankSymbols are the symbols that are drawn as an empty cell, neither
// spaces nor default ignorable, so that a name of them, or ending in one,
// looks like another: U+2800 BRAILLE PATTERN BLANK (the braille cell with no
// dot) and U+1D159 MUSICAL SYMBOL NULL NOTEHEAD.
var blankSymbols = &unicode.RangeTable{
	R16: []unicode.Range16{{0x2800, 0x2800, 1}},
	R32: []unicode.Range32{{0x1D159, 0x1D159, 1}},
}

// variationSelectorKept reports whether a name may hold the variation
// selector r (unicode.Variation_Selector) that starts at at in s: only after
// a character it has a variation of, where it picks that variation; anywhere
// else it changes nothing that shows and only makes the name another string
// ("admin\uFE0F" shows as "admin"). So
//   - U+FE0E and U+FE0F (text and emoji presentation) follow an emoji: a
//     keycap base (# * 0-9, as in 1\uFE0F\u20E3), a symbol (So, as nearly
//     every emoji is) or one of the emoji that are not (emojiNotSymbols);
//   - U+FE00..U+FE0D follow a Han ideograph (the CJK compatibility
//     variants) or a base of another standardized variant (textVariantBases);
//   - U+E0100..U+E01EF (ideographic variation selectors) follow a Han
//     ideograph: every sequence of the Ideographic Variation Database is one;
//   - the Mongolian free variation selectors (U+180B..U+180D, U+180F) follow
//     a Mongolian character.
func variationSelectorKept(r rune, at int, s string) bool {
	prev, n := utf8.DecodeLastRuneInString(s[:at])
	if n == 0 || prev == utf8.RuneError {
		return false
	}
	switch {
	case r == '\uFE0E' || r == '\uFE0F':
		return prev == '#' || prev == '*' || '0' <= prev && prev <= '9' ||
			unicode.In(prev, unicode.So, emojiNotSymbols)
	case r >= '\uFE00' && r <= '\uFE0D':
		return unicode.In(prev, unicode.Han, textVariantBases)
	case r >= 0xE0100 && r <= 0xE01EF:
		return unicode.Is(unicode.Han, prev)
	default: // U+180B..U+180D, U+180F
		return unicode.Is(unicode.Mongolian, prev)
	}
}

// emojiNotSymbols are the characters that have an emoji presentation
// sequence (emoji-variation-sequences.txt of Unicode 15) but are not symbols
// (So): double exclamation mark, exclamation question mark, information
// source, the left right arrow, the medium squares, the curving arrows, the
// wavy dash and the part alternation mark.
var emojiNotSymbols = &unicode.RangeTable{R16: []unicode.Range16{
	{0x203C, 0x203C, 1}, {0x2049, 0x2049, 1}, {0x2139, 0x2139, 1}, {0x2194, 0x2194, 1},
	{0x25FB, 0x25FE, 1}, {0x2934, 0x2935, 1}, {0x3030, 0x3030, 1}, {0x303D, 0x303D, 1},
}}

// textVariantBases are the characters other than Han ideographs that
// StandardizedVariants.txt (Unicode 15.0) gives a variation with U+FE00..U+FE0D:
// the digit zero (short diagonal stroke), mathematical symbols and script
// letters, fullwidth punctuation, and letters of Myanmar, Phags-pa,
// Manichaean and Egyptian hieroglyphs.
var textVariantBases = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x0030, 0x0030, 1}, {0x1000, 0x1000, 1}, {0x1002, 0x1002, 1}, {0x1004, 0x1004, 1},
		{0x1010, 0x1011, 1}, {0x1015, 0x1015, 1}, {0x1019, 0x101A, 1}, {0x101C, 0x101D, 1},
		{0x1022, 0x1022, 1}, {0x1031, 0x1031, 1}, {0x1075, 0x1075, 1}, {0x1078, 0x1078, 1},
		{0x107A, 0x107A, 1}, {0x1080, 0x1080, 1}, {0x210B, 0x210B, 1}, {0x2110, 0x2110, 1},
		{0x2112, 0x2112, 1}, {0x211B, 0x211B, 1}, {0x212C, 0x212C, 1}, {0x2130, 0x2131, 1},
		{0x2133, 0x2133, 1}, {0x2205, 0x2205, 1}, {0x2229, 0x222A, 1}, {0x2268, 0x2269, 1},
		{0x2272, 0x2273, 1}, {0x228A, 0x228B, 1}, {0x2293, 0x2295, 1}, {0x2297, 0x2297, 1},
		{0x229C, 0x229C, 1}, {0x22DA, 0x22DB, 1}, {0x2A3C, 0x2A3D, 1}, {0x2A9D, 0x2A9E, 1},
		{0x2AAC, 0x2AAD, 1}, {0x2ACB, 0x2ACC, 1}, {0x3001, 0x3002, 1}, {0xA856, 0xA856, 1},
		{0xA85C, 0xA85C, 1}, {0xA85E, 0xA860, 1}, {0xA868, 0xA868, 1}, {0xAA60, 0xAA66, 1},
		{0xAA6B, 0xAA6C, 1}, {0xAA6F, 0xAA6F, 1}, {0xAA7A, 0xAA7A, 1}, {0xFF01, 0xFF01, 1},
		{0xFF0C, 0xFF0C, 1}, {0xFF0E, 0xFF0E, 1}, {0xFF10, 0xFF10, 1}, {0xFF1A, 0xFF1B, 1},
		{0xFF1F, 0xFF1F, 1},
	},
	R32: []unicode.Range32{
		{0x10AC5, 0x10AC6, 1}, {0x10AD6, 0x10AD7, 1}, {0x10AE1, 0x10AE1, 1}, {0x13091, 0x13093, 1},
		{0x130A9, 0x130A9, 1}, {0x1310F, 0x1310F, 1}, {0x13117, 0x13117, 1}, {0x1311C, 0x1311C, 1},
		{0x13121, 0x13121, 1}, {0x13127, 0x13127, 1}, {0x13139, 0x13139, 1}, {0x13183, 0x13183, 1},
		{0x13187, 0x13187, 1}, {0x131A0, 0x131A0, 1}, {0x131B1, 0x131B1, 1}, {0x131B8, 0x131BA, 1},
		{0x131CB, 0x131CB, 1}, {0x131EE, 0x131EE, 1}, {0x131F8, 0x131FA, 1}, {0x13216, 0x13216, 1},
		{0x13257, 0x13257, 1}, {0x1327B, 0x1327B, 1}, {0x1327F, 0x1327F, 1}, {0x13285, 0x13285, 1},
		{0x1328C, 0x1328C, 1}, {0x132A4, 0x132A4, 1}, {0x132AA, 0x132AA, 1}, {0x132CB, 0x132CB, 1},
		{0x132DC, 0x132DC, 1}, {0x132E7, 0x132E7, 1}, {0x132E9, 0x132E9, 1}, {0x132F8, 0x132F8, 1},
		{0x132FD, 0x132FD, 1}, {0x13302, 0x13303, 1}, {0x13307, 0x13308, 1}, {0x13310, 0x13314, 1},
		{0x1331B, 0x1331C, 1}, {0x13321, 0x13322, 1}, {0x13331, 0x13331, 1}, {0x1333B, 0x1333C, 1},
		{0x1334A, 0x1334A, 1}, {0x13361, 0x13361, 1}, {0x13373, 0x13373, 1}, {0x13377, 0x13378, 1},
		{0x1337D, 0x1337D, 1}, {0x13385, 0x13385, 1}, {0x13399, 0x1339A, 1}, {0x133AF, 0x133B0, 1},
		{0x133BF, 0x133BF, 1}, {0x133D3, 0x133D3, 1}, {0x133DD, 0x133DD, 1}, {0x133F2, 0x133F2, 1},
		{0x133F5, 0x133F6, 1}, {0x13403, 0x13403, 1}, {0x13416, 0x13416, 1}, {0x13419, 0x1341A, 1},
		{0x13423, 0x13423, 1}, {0x1342C, 0x1342C, 1}, {0x1342E, 0x1342E, 1}, {0x13443, 0x13446, 1},
		{0x1D49C, 0x1D49C, 1}, {0x1D49E, 0x1D49F, 1}, {0x1D4A2, 0x1D4A2, 1}, {0x1D4A5, 0x1D4A6, 1},
		{0x1D4A9, 0x1D4AC, 1}, {0x1D4AE, 0x1D4B5, 1},
	},
	LatinOffset: 1,
}
