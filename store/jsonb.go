package store

// compactJSONB appends to dst the text of a jsonb value as Postgres writes it,
// without its insignificant spaces (jsonb's text has one after each ':' and
// ',' outside strings): what encoding/json.Compact makes of it, without
// validating it, which Postgres did when it stored the value. For any valid
// JSON its output is json.Compact's (FuzzCompactJSONB). Hand-written for the
// audit log's pages, where json.Compact took 5.7% of the server's CPU:
// docs/decisions/2026-12-02-compact-jsonb.md.
func compactJSONB(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		case '"':
			// Copy the string whole, escapes included.
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		// A run of anything else up to the next space or string.
		j := i + 1
		for j < len(src) && src[j] != '"' && src[j] != ' ' && src[j] != '\t' && src[j] != '\n' && src[j] != '\r' {
			j++
		}
		dst = append(dst, src[i:j]...)
		i = j
	}
	return dst
}
