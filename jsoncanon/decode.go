package jsoncanon

import (
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeObject decodes the JSON object that b starts with (after white
// space) to what json.NewDecoder(r).UseNumber().Decode(&m) gives for a map m
// (reflect.DeepEqual): numbers as json.Number of their literal, the last of
// duplicate keys, escapes and surrogate pairs decoded, each byte of invalid
// UTF-8 and each lone surrogate as U+FFFD, empty arrays as empty non-nil
// slices. Like Decoder.Decode it ignores whatever follows the object. It
// reports false for anything else (another top-level value, a syntax error,
// nesting deeper than 1000): the caller then decodes with encoding/json,
// which gives the answer or the error. It is Decoder{}.DecodeObject.
func DecodeObject(b []byte) (map[string]any, bool) {
	return Decoder{}.DecodeObject(b)
}

// Decoder decodes as DecodeObject and DecodeFields do, with the departure
// its field may ask for.
type Decoder struct {
	// Copy gives each decoded key, string and json.Number memory of its
	// own. Without it those without escapes are slices of one copy of the
	// text: a value kept after the text is done with, however short, keeps
	// all of it (a subscription's variable, a request body of 1 MiB).
	Copy bool
}

// DecodeObject is DecodeObject with dec's departure.
func (dec Decoder) DecodeObject(b []byte) (map[string]any, bool) {
	d := decoder{s: string(b), copy: dec.Copy}
	d.space()
	if d.i >= len(d.s) || d.s[d.i] != '{' {
		return nil, false
	}
	return d.object(0)
}

// decoder reads s from i. Strings without escapes, and numbers, are slices
// of s unless copy is set.
type decoder struct {
	s    string
	i    int
	copy bool
}

func (d *decoder) space() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// DecodeFields decodes b when it is one JSON object and nothing more but
// white space, calling field with each of its members in the order they are
// written (duplicates included), their values decoded as DecodeObject
// decodes them. It reports false for anything else (field may have been
// called for the members before the fault): the caller then decodes with
// encoding/json. It is for decoding into a struct, whose members
// encoding/json assigns in document order. It is Decoder{}.DecodeFields.
func DecodeFields(b []byte, field func(key string, v any)) bool {
	return Decoder{}.DecodeFields(b, field)
}

// DecodeFields is DecodeFields with dec's departure.
func (dec Decoder) DecodeFields(b []byte, field func(key string, v any)) bool {
	d := decoder{s: string(b), copy: dec.Copy}
	d.space()
	if d.i >= len(d.s) || d.s[d.i] != '{' || !d.members(0, field) {
		return false
	}
	d.space()
	return d.i == len(d.s)
}

// object reads an object from its '{' at d.i.
func (d *decoder) object(depth int) (map[string]any, bool) {
	m := map[string]any{}
	if !d.members(depth, func(k string, v any) { m[k] = v }) {
		return nil, false
	}
	return m, true
}

// members reads an object from its '{' at d.i, calling field with each
// member in order.
func (d *decoder) members(depth int, field func(key string, v any)) bool {
	if depth >= maxDepth {
		return false
	}
	d.i++
	d.space()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return true
	}
	for {
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return false
		}
		k, ok := d.string()
		if !ok {
			return false
		}
		d.space()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return false
		}
		d.i++
		d.space()
		v, ok := d.value(depth)
		if !ok {
			return false
		}
		field(k, v)
		d.space()
		if d.i >= len(d.s) {
			return false
		}
		switch d.s[d.i] {
		case ',':
			d.i++
			d.space()
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array from its '[' at d.i.
func (d *decoder) array(depth int) ([]any, bool) {
	if depth >= maxDepth {
		return nil, false
	}
	d.i++
	a := []any{}
	d.space()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return a, true
	}
	for {
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		d.space()
		if d.i >= len(d.s) {
			return nil, false
		}
		switch d.s[d.i] {
		case ',':
			d.i++
			d.space()
		case ']':
			d.i++
			return a, true
		default:
			return nil, false
		}
	}
}

// value reads a value at d.i (white space skipped), inside containers
// depth deep.
func (d *decoder) value(depth int) (any, bool) {
	if d.i >= len(d.s) {
		return nil, false
	}
	switch c := d.s[d.i]; {
	case c == '{':
		m, ok := d.object(depth + 1)
		return m, ok
	case c == '[':
		a, ok := d.array(depth + 1)
		return a, ok
	case c == '"':
		s, ok := d.string()
		return s, ok
	case c == 't':
		return true, d.word("true")
	case c == 'f':
		return false, d.word("false")
	case c == 'n':
		return nil, d.word("null")
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	}
	return nil, false
}

// word reads the literal w.
func (d *decoder) word(w string) bool {
	if len(d.s)-d.i < len(w) || d.s[d.i:d.i+len(w)] != w {
		return false
	}
	d.i += len(w)
	return true
}

// number reads a number by JSON's grammar, as a json.Number of its text.
func (d *decoder) number() (any, bool) {
	s, start := d.s, d.i
	i := start
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	d.i = i
	if d.copy {
		return json.Number(strings.Clone(s[start:i])), true
	}
	return json.Number(s[start:i]), true
}

// string reads a string from its opening quote at d.i.
func (d *decoder) string() (string, bool) {
	s := d.s
	start := d.i + 1
	escaped, ascii := false, true
	i := start
	for ; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			break
		}
		if c < 0x20 {
			return "", false
		}
		if c == '\\' {
			escaped = true
			i++ // the escaped byte is checked by unquote
		} else if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if i >= len(s) {
		return "", false
	}
	d.i = i + 1
	if raw := s[start:i]; !escaped && (ascii || utf8.ValidString(raw)) {
		if d.copy {
			return strings.Clone(raw), true
		}
		return raw, true
	}
	return unquote(s[start:i]) // a string of its own
}

// unquote decodes the body of a string with escapes or non-ASCII bytes as
// encoding/json's unquoteBytes does.
func unquote(s string) (string, bool) {
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			if r+1 >= len(s) {
				return "", false
			}
			switch s[r+1] {
			case '"', '\\', '/':
				b = append(b, s[r+1])
				r += 2
			case 'b':
				b = append(b, '\b')
				r += 2
			case 'f':
				b = append(b, '\f')
				r += 2
			case 'n':
				b = append(b, '\n')
				r += 2
			case 'r':
				b = append(b, '\r')
				r += 2
			case 't':
				b = append(b, '\t')
				r += 2
			case 'u':
				rr := u4(s[r:])
				if rr < 0 {
					return "", false
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, u4(s[r:])); dec != utf8.RuneError {
						r += 6
						b = utf8.AppendRune(b, dec)
						break
					}
					rr = utf8.RuneError
				}
				b = utf8.AppendRune(b, rr)
			default:
				return "", false
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRuneInString(s[r:])
			if rr == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, s[r:r+size]...)
			}
			r += size
		}
	}
	return string(b), true
}

// u4 decodes \uXXXX at the start of s, or returns -1.
func u4(s string) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range []byte(s[2:6]) {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
