package jsoncanon

// WithinItems reports whether the JSON text b has at most max items: the
// members of each object and the elements of each array, at any depth, an
// empty object or array counting as one. It bounds the work of decoding b,
// which its length alone does not: a megabyte of empty objects is 700,000
// items, about 350,000 maps, 90 ms of encoding/json's CPU and 45 MB of
// allocations (docs/decisions/2026-12-05-json-items.md). It reads b once,
// without decoding or allocating, and stops past max; a b of at most max
// bytes is within it unread. For b that is not JSON the count means
// nothing: decoding it fails anyway. Items counts a text that comes in
// pieces. b is text or bytes alike (a GET's parameter is counted without
// a copy).
func WithinItems[T string | []byte](b T, max int) bool {
	if len(b) <= max {
		return true
	}
	var c Items
	return add(&c, b, max)
}

// Items counts the items of a JSON text read in pieces, as WithinItems
// counts them: a reader can stop reading a text once it is past its bound,
// without holding the rest. Its zero value is a count of nothing yet.
//
// Outside strings, each '{' and '[' counts its container's first item (or
// the empty container), and each ',' one item after that.
type Items struct {
	n        int
	inString bool
	escaped  bool
}

// Add counts the items of p, the text's next piece, and reports whether the
// text so far has at most max items. Past max it stops counting: the text
// is over its bound whatever follows.
func (c *Items) Add(p []byte, max int) bool { return add(c, p, max) }

// add is Items.Add for text or bytes.
func add[T string | []byte](c *Items, p T, max int) bool {
	if c.n > max {
		return false
	}
	for i := 0; i < len(p); i++ {
		b := p[i]
		if c.inString {
			switch {
			case c.escaped:
				c.escaped = false
			case b == '\\':
				c.escaped = true
			case b == '"':
				c.inString = false
			}
			continue
		}
		switch b {
		case '"':
			c.inString = true
		case '{', '[', ',':
			if c.n++; c.n > max {
				return false
			}
		}
	}
	return true
}
