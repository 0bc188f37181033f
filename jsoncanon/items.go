package jsoncanon

// WithinItems reports whether the JSON text b has at most max items: the
// members of each object and the elements of each array, at any depth, an
// empty object or array counting as one. It bounds the work of decoding b,
// which its length alone does not: a megabyte of empty objects is 700,000
// items, about 350,000 maps, 90 ms of encoding/json's CPU and 45 MB of
// allocations (docs/decisions/2026-12-05-json-items.md). It reads b once,
// without decoding or allocating, and stops past max; a b of at most max
// bytes is within it unread. For b that is not JSON the count means
// nothing: decoding it fails anyway.
//
// Outside strings, each '{' and '[' counts its container's first item (or
// the empty container), and each ',' one item after that.
func WithinItems(b []byte, max int) bool {
	if len(b) <= max {
		return true
	}
	n := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[', ',':
			if n++; n > max {
				return false
			}
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return true
}
