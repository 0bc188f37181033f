// Package jsoncanon writes and reads decoded JSON values (nil, booleans,
// strings, json.Number, float64, integers, map[string]any and []any) byte for
// byte as encoding/json does, without its reflection: the audit chain's
// canonical encoding, the idempotency fingerprint and the audit insert's
// metadata, where encoding/json's reflection was most of the CPU
// (docs/decisions/2026-12-03-canonical-encoding.md). encoding/json stays the
// oracle: whatever these functions do not handle they report, and the caller
// then uses encoding/json for the whole value, so their output never differs
// from its. A leaf package.
package jsoncanon

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxDepth is the deepest nesting Append and DecodeObject handle; deeper
// values (and cycles) are left to encoding/json.
const maxDepth = 1000

// Encoder appends values as encoding/json.Marshal writes them, with two
// departures its fields may ask for.
type Encoder struct {
	// Number, when not nil, writes every number instead of Marshal's rules:
	// a json.Number's literal, or a float64 as strconv.FormatFloat(f, 'g',
	// -1, 64) writes it. It reports false for a number it does not accept.
	// With Number set, integer types are not handled (Append reports false).
	Number func(dst []byte, literal string) ([]byte, bool)
	// EmptyNil writes a nil map[string]any as {} and a nil []any as [],
	// where Marshal writes null.
	EmptyNil bool
}

// Append appends v as encoding/json.Marshal(v) writes it and reports true,
// or reports false when v holds something it does not handle (another type,
// an invalid json.Number, NaN or an infinity, nesting deeper than 1000): the
// caller then marshals v with encoding/json, which gives the answer (or the
// error). It is Encoder{}.Append.
func Append(dst []byte, v any) ([]byte, bool) {
	return Encoder{}.Append(dst, v)
}

// Append appends v as encoding/json.Marshal(v) writes it, with e's
// departures, and reports true; or it reports false (and dst's contents past
// its length are undefined) when v holds something it does not handle.
func (e Encoder) Append(dst []byte, v any) ([]byte, bool) {
	return e.value(dst, v, 0)
}

func (e Encoder) value(dst []byte, v any, depth int) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case bool:
		if v {
			return append(dst, "true"...), true
		}
		return append(dst, "false"...), true
	case string:
		return AppendString(dst, v), true
	case json.Number:
		if e.Number != nil {
			return e.Number(dst, string(v))
		}
		s := string(v)
		if s == "" {
			s = "0" // Marshal writes the zero Number as 0
		}
		if !validNumber(s) {
			return dst, false
		}
		return append(dst, s...), true
	case float64:
		if e.Number != nil {
			return e.Number(dst, strconv.FormatFloat(v, 'g', -1, 64))
		}
		return appendFloat(dst, v)
	case map[string]any:
		if v == nil {
			if e.EmptyNil {
				return append(dst, "{}"...), true
			}
			return append(dst, "null"...), true
		}
		if depth >= maxDepth {
			return dst, false
		}
		return e.object(dst, v, depth+1)
	case []any:
		if v == nil {
			if e.EmptyNil {
				return append(dst, "[]"...), true
			}
			return append(dst, "null"...), true
		}
		if depth >= maxDepth {
			return dst, false
		}
		dst = append(dst, '[')
		for i, elem := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = e.value(dst, elem, depth+1); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	}
	if e.Number != nil {
		return dst, false
	}
	switch v := v.(type) {
	case int:
		return strconv.AppendInt(dst, int64(v), 10), true
	case int64:
		return strconv.AppendInt(dst, v, 10), true
	case int32:
		return strconv.AppendInt(dst, int64(v), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(v), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(v), 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint64:
		return strconv.AppendUint(dst, v, 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(v), 10), true
	}
	return dst, false
}

// object appends a non-nil map with its keys sorted, as Marshal does.
func (e Encoder) object(dst []byte, m map[string]any, depth int) ([]byte, bool) {
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		var ok bool
		if dst, ok = e.value(dst, m[k], depth); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// appendFloat appends f as encoding/json's float encoder writes a float64:
// like fmt's %g, with the exponent cut-offs of ES6 and no padding of the
// exponent. NaN and the infinities are not JSON (false).
func appendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// validNumber reports whether s is a JSON number literal (encoding/json's
// isValidNumber).
func validNumber(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = s[1:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && '0' <= s[1] && s[1] <= '9' {
		s = s[2:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	return s == ""
}

const hexDigits = "0123456789abcdef"

// AppendString appends s quoted as encoding/json.Marshal writes a string:
// '"' and '\' escaped, \b \f \n \r \t for those controls and \u00XX for the
// other bytes below 0x20, '<', '>' and '&' as \u003c, \u003e and \u0026
// (HTML-safe), U+2028 and U+2029 as \u2028 and \u2029, and every byte of
// invalid UTF-8 as \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if safe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // other controls, and <, >, &
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// safe tells the ASCII bytes that AppendString writes as they are.
var safe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()
