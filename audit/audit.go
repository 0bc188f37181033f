// Package audit defines TaskFlow's audit events: field snapshots and diffs
// governed by per-field rules, and the canonical encoding that the per-chain
// hash covers. The store writes events with it inside the transaction of each
// change, with the request context of package reqinfo.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"taskflow/jsoncanon"
)

// Event is an audit event as a domain operation describes it; the store adds the
// request context, time, id and hashes when it appends it.
type Event struct {
	// WorkspaceID is the workspace of the change, or nil for account events.
	WorkspaceID *string
	// ActorID is the user who acted, or nil (a failed login of an unknown e-mail).
	ActorID *string
	// Action is one of the contract's actions, such as "task.created".
	Action string
	// EntityID is the id of the changed thing ("" when there is none).
	EntityID string
	// Metadata holds a snapshot (create, delete) or {"changes": diff} (update).
	Metadata map[string]any
}

// EntityType returns the word before the dot of the action.
func (e Event) EntityType() string {
	t, _, _ := strings.Cut(e.Action, ".")
	return t
}

// ChainKey returns the hash chain the event belongs to: its workspace, else the
// account of its entity or actor, else "anonymous".
func (e Event) ChainKey() string {
	switch {
	case e.WorkspaceID != nil:
		return *e.WorkspaceID
	case e.EntityType() == "user" && e.EntityID != "":
		return "user:" + e.EntityID
	case e.ActorID != nil:
		return "user:" + *e.ActorID
	}
	return "anonymous"
}

// Field rules, given in each domain struct field's `audit` tag. Every exported
// field must have one, so a new column can't leak a secret unnoticed.
const (
	RuleTrack  = "track"  // recorded in snapshots and diffs
	RuleIgnore = "ignore" // bookkeeping (timestamps): never recorded
	RuleSecret = "secret" // never recorded; a change is noted as "[redacted]" without values
)

// OptionURL, after the track rule (`audit:"track,url"`), records a URL field
// (a string or *string) as RedactURL gives it, and next to it, as the field
// "<name>Sha256", URLSha256 of the whole URL: its path, query, fragment and
// user information, where integrations keep their credentials (a Slack
// webhook's token is its path), never reach the log, while an admin who holds
// a URL can still find its events. In a diff both fields change together.
const OptionURL = "url"

// Rule returns the rule of an `audit` tag's value: what comes before its
// options ("track" of "track,url").
func Rule(tag string) string {
	rule, _, _ := strings.Cut(tag, ",")
	return rule
}

// URLSha256Suffix ends the name of the field that holds the SHA-256 of a URL
// field recorded with OptionURL.
const URLSha256Suffix = "Sha256"

// RedactURL returns what the log records of the URL s: its scheme and host
// (with the port, if any) followed by "/…", whatever came after them (an
// empty path too): "https://hooks.slack.com/…" of
// "https://hooks.slack.com/services/T0/B0/secret?x=1". A user name and
// password before the host are dropped. It reads s as text, not as a parsed
// URL, so that Postgres makes the same of it (RedactURLSQL): the scheme is
// what precedes the first "://" (none of ":/?#" in it), the host and port what
// follows it up to the first "/", "?" or "#", after its last "@". Text without
// such a scheme gives "…".
func RedactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || strings.ContainsAny(scheme, ":/?#") {
		return "…"
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return scheme + "://" + rest + "/…"
}

// RedactURLSQL returns the SQL expression of RedactURL of the text
// expression url (NULL for NULL).
func RedactURLSQL(url string) string {
	return `CASE WHEN (` + url + `) IS NOT NULL THEN coalesce((SELECT m[1] || m[2] || '/…' FROM regexp_match(` + url +
		`, '^([^:/?#]*://)(?:[^/?#]*@)?([^/?#]*)') m), '…') END`
}

// URLSha256 returns the SHA-256 of the URL s (its UTF-8 bytes), in lower-case
// hex.
func URLSha256(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// URLSha256SQL returns the SQL expression of URLSha256 of the text
// expression url (NULL for NULL).
func URLSha256SQL(url string) string {
	return `encode(sha256(convert_to(` + url + `, 'UTF8')), 'hex')`
}

// field is one audited field of a struct type.
type field struct {
	index int
	name  string // the JSON name
	rule  string
	url   bool // recorded with OptionURL
}

// fieldsOfType remembers fieldsOf's answer for each type (reflect.Type to
// fieldsAnswer): a few domain types, asked on every change.
var fieldsOfType sync.Map

// fieldsAnswer is one answer of fieldsOf.
type fieldsAnswer struct {
	fields []field
	err    error
}

// fieldsOf returns the audited fields of struct type t, or an error naming a
// field without a valid rule.
func fieldsOf(t reflect.Type) ([]field, error) {
	if a, ok := fieldsOfType.Load(t); ok {
		return a.(fieldsAnswer).fields, a.(fieldsAnswer).err
	}
	fields, err := readFields(t)
	fieldsOfType.Store(t, fieldsAnswer{fields, err})
	return fields, err
}

// readFields is fieldsOf without its memory.
func readFields(t reflect.Type) ([]field, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("audit: %s is not a struct", t)
	}
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		rule, option, _ := strings.Cut(f.Tag.Get("audit"), ",")
		if rule != RuleTrack && rule != RuleIgnore && rule != RuleSecret {
			return nil, fmt.Errorf("audit: field %s.%s has no audit rule (track, ignore or secret)", t.Name(), f.Name)
		}
		url := option == OptionURL && rule == RuleTrack
		if option != "" && !url {
			return nil, fmt.Errorf("audit: field %s.%s: option %q of rule %s: the only option is %s, of %s",
				t.Name(), f.Name, option, rule, OptionURL, RuleTrack)
		}
		if ft := f.Type; url && ft.Kind() != reflect.String && (ft.Kind() != reflect.Pointer || ft.Elem().Kind() != reflect.String) {
			return nil, fmt.Errorf("audit: field %s.%s: option %s on a %s (a string or *string only)", t.Name(), f.Name, OptionURL, ft)
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			name = strings.ToLower(f.Name[:1]) + f.Name[1:]
		}
		out = append(out, field{index: i, name: name, rule: rule, url: url})
	}
	names := map[string]bool{}
	for _, f := range out {
		names[f.name] = true
	}
	for _, f := range out {
		if f.url && names[f.name+URLSha256Suffix] {
			return nil, fmt.Errorf("audit: field %s's hash %s%s is the name of another field of %s", f.name, f.name, URLSha256Suffix, t.Name())
		}
	}
	return out, nil
}

// Check returns an error if a field of v's struct type has no audit rule. Tests
// call it for every domain type.
func Check(v any) error {
	_, err := fieldsOf(reflect.TypeOf(v))
	return err
}

// value returns the plain value of a field for the log: nil for a nil pointer,
// the pointed-to value otherwise, times in UTC RFC 3339.
func value(v reflect.Value) any {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if t, ok := v.Interface().(time.Time); ok {
		return t.UTC().Format(time.RFC3339Nano)
	}
	if v.Kind() == reflect.String {
		return v.String()
	}
	return v.Interface()
}

// Snapshot returns the tracked fields of the struct v (or *v) by JSON name; a
// URL field (OptionURL) as RedactURL gives it, with its URLSha256 as
// "<name>Sha256". It panics if a field has no rule: that is a programming
// error caught by tests.
func Snapshot(v any) map[string]any {
	fields, err := fieldsOf(reflect.TypeOf(v))
	if err != nil {
		panic(err)
	}
	rv := reflect.Indirect(reflect.ValueOf(v))
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		if f.rule != RuleTrack {
			continue
		}
		v := value(rv.Field(f.index))
		if f.url {
			out[f.name], out[f.name+URLSha256Suffix] = RedactedURL(v)
			continue
		}
		out[f.name] = v
	}
	return out
}

// RedactedURL returns RedactURL and URLSha256 of the value of a field with
// OptionURL (a string; anything else, nil included: nil and nil), as
// Snapshot and Changes record it.
func RedactedURL(v any) (shown, sum any) {
	s, ok := v.(string)
	if !ok {
		return nil, nil
	}
	return RedactURL(s), URLSha256(s)
}

// URLFields returns the JSON names of the fields of the struct v (or *v)
// recorded with OptionURL: those whose SQL-made snapshots and diffs must
// record RedactURLSQL and URLSha256SQL of the column (nil when there is none:
// every update asks). It panics as Snapshot.
func URLFields(v any) map[string]bool {
	fields, err := fieldsOf(reflect.TypeOf(v))
	if err != nil {
		panic(err)
	}
	var out map[string]bool
	for _, f := range fields {
		if f.url {
			if out == nil {
				out = map[string]bool{}
			}
			out[f.name] = true
		}
	}
	return out
}

// Change is one field's old and new value.
type Change struct {
	From any `json:"from"`
	To   any `json:"to"`
}

// Changes compares two values of the same struct type and returns
// {field: {from, to}} for every tracked field that differs; a secret field that
// differs is recorded as {from: "[redacted]", to: "[redacted]"}, a URL field
// (OptionURL) by its redacted forms and, as "<field>Sha256", its hashes (the
// forms may be the same: the hashes differ). It panics if a
// field has no rule or the types differ.
func Changes(before, after any) map[string]any {
	tb, ta := reflect.TypeOf(before), reflect.TypeOf(after)
	if tb != ta {
		panic(fmt.Sprintf("audit: Changes(%s, %s)", tb, ta))
	}
	fields, err := fieldsOf(tb)
	if err != nil {
		panic(err)
	}
	vb, va := reflect.Indirect(reflect.ValueOf(before)), reflect.Indirect(reflect.ValueOf(after))
	out := map[string]any{}
	for _, f := range fields {
		if f.rule == RuleIgnore {
			continue
		}
		from, to := value(vb.Field(f.index)), value(va.Field(f.index))
		if reflect.DeepEqual(from, to) {
			continue
		}
		if f.rule == RuleSecret {
			out[f.name] = Change{From: "[redacted]", To: "[redacted]"}
			continue
		}
		if f.url {
			shownFrom, sumFrom := RedactedURL(from)
			shownTo, sumTo := RedactedURL(to)
			out[f.name] = Change{From: shownFrom, To: shownTo}
			out[f.name+URLSha256Suffix] = Change{From: sumFrom, To: sumTo}
			continue
		}
		out[f.name] = Change{From: from, To: to}
	}
	return out
}

// Record is an event as stored: the canonical encoding of everything but its own
// hash is what the hash chain covers.
type Record struct {
	ID          string         `json:"id"`
	ChainKey    string         `json:"chainKey"`
	WorkspaceID *string        `json:"workspaceId"`
	ActorID     *string        `json:"actorId"`
	Action      string         `json:"action"`
	EntityType  string         `json:"entityType"`
	EntityID    string         `json:"entityId"`
	OccurredAt  time.Time      `json:"occurredAt"`
	IP          *string        `json:"ip"`
	UserAgent   *string        `json:"userAgent"`
	RequestID   *string        `json:"requestId"`
	Metadata    map[string]any `json:"metadata"`
	// TraceID is the request's W3C trace id. It is omitted from the encoding
	// when nil, so the events recorded before it existed, or without tracing,
	// hash as they always did; when set, the hash covers it.
	TraceID *string `json:"traceId,omitempty"`
}

// NormalizeMetadata round-trips metadata through JSON (numbers kept as written),
// so that it hashes the same before it is stored and after it is read back.
// Metadata that is already what the round trip gives back (Snapshot's and
// Changes' of strings, nulls and booleans: every change's) is copied
// without it: the round trip took 4.4% of the server's CPU under createTask
// (docs/decisions/2026-12-02-audit-metadata.md).
func NormalizeMetadata(m map[string]any) (map[string]any, error) {
	if m == nil {
		return map[string]any{}, nil
	}
	if v, ok := decoded(m); ok {
		return v.(map[string]any), nil
	}
	return normalizeJSON(m)
}

// normalizeJSON is NormalizeMetadata by the round trip through JSON.
func normalizeJSON(m map[string]any) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("audit: encode metadata: %w", err)
	}
	out, err := DecodeMetadata(b)
	if err != nil {
		return nil, err
	}
	// jsonb refuses \u0000 in strings and keys: replace it, as json.Marshal already
	// replaced invalid UTF-8.
	v, _ := withoutNUL(out).(map[string]any)
	return v, nil
}

// decoded returns a copy of v as decoding its JSON would give it back, when v
// holds nothing that the round trip changes: nulls, booleans, strings of
// valid UTF-8 without NUL, and maps (with such keys) and slices of them, and
// Changes (which become maps of "from" and "to"). A number or any other type
// gives false: NormalizeMetadata then takes the round trip.
func decoded(v any) (any, bool) {
	switch v := v.(type) {
	case nil, bool:
		return v, true
	case string:
		return v, plainText(v)
	case map[string]any:
		if v == nil {
			return nil, true // null
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			d, ok := decoded(e)
			if !ok || !plainText(k) {
				return nil, false
			}
			out[k] = d
		}
		return out, true
	case []any:
		if v == nil {
			return nil, true // null
		}
		out := make([]any, len(v))
		for i, e := range v {
			d, ok := decoded(e)
			if !ok {
				return nil, false
			}
			out[i] = d
		}
		return out, true
	case Change:
		from, ok := decoded(v.From)
		if !ok {
			return nil, false
		}
		to, ok := decoded(v.To)
		return map[string]any{"from": from, "to": to}, ok
	}
	return nil, false
}

// plainText reports whether the round trip through JSON and jsonb leaves s as
// it is: valid UTF-8 without NUL.
func plainText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// withoutNUL returns a decoded JSON value with every NUL character of its strings
// and keys replaced by U+FFFD.
func withoutNUL(v any) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "\x00", "\uFFFD")
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(e)
		}
		return out
	case []any:
		for i, e := range v {
			v[i] = withoutNUL(e)
		}
		return v
	}
	return v
}

// MaxTextLen is the longest request context value (user agent, request id, IP)
// recorded, in bytes.
const MaxTextLen = 1024

// CleanText returns s as Postgres text accepts it: valid UTF-8 (invalid bytes
// become U+FFFD), no NUL, at most MaxTextLen bytes (cut at a character boundary).
// A hostile User-Agent header must not make the change it comes with fail.
func CleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > MaxTextLen {
		cut := MaxTextLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// DecodeMetadata decodes stored metadata, keeping numbers as json.Number:
// what json.Decoder.UseNumber decodes of b's first value into a map. An
// object jsoncanon.DecodeObject reads (every one jsonb gives back) it decodes
// without encoding/json's reflection, which took 29% of the sealer's CPU
// (docs/decisions/2026-12-03-canonical-encoding.md); anything else, errors
// included, goes through encoding/json.
func DecodeMetadata(b []byte) (map[string]any, error) {
	if m, ok := jsoncanon.DecodeObject(b); ok {
		return m, nil
	}
	return decodeMetadataJSON(b)
}

// decodeMetadataJSON is DecodeMetadata by encoding/json.
func decodeMetadataJSON(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	out := map[string]any{}
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("audit: decode metadata: %w", err)
	}
	return out, nil
}

// Hash returns SHA-256(prev || canonical(r)). The canonical form is r's JSON with
// the time in UTC at microsecond precision (what Postgres keeps), map keys sorted
// and every number written in one normal form (see canonicalNumber), so that the
// hash is the same for the metadata that was appended and for the metadata that
// jsonb gives back (jsonb keeps numbers as numeric: 1e2 comes back as 100).
func Hash(prev []byte, r Record) ([]byte, error) {
	b, err := Canonical(r)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(b)
	return h.Sum(nil), nil
}

// Canonical returns the canonical encoding of r that Hash covers: what
// json.Marshal gives for r with its time in UTC at microsecond precision and
// its metadata's numbers in canonical form (nil maps and slices in it as {}
// and []). It writes the record by hand and its metadata with jsoncanon, byte
// for byte as encoding/json does; a record it cannot write so (a value of
// another type in the metadata, a number that is not one, a year outside
// 0-9999) takes encoding/json's way, which gives the answer or the error.
// encoding/json's reflection took 23% of the sealer's CPU here
// (docs/decisions/2026-12-03-canonical-encoding.md).
func Canonical(r Record) ([]byte, error) {
	if b, ok := appendCanonical(make([]byte, 0, 1024), &r); ok {
		return b, nil
	}
	return canonicalJSON(r)
}

// canonicalMetadata writes metadata as canonicalValue's copy of it marshals.
var canonicalMetadata = jsoncanon.Encoder{Number: appendCanonicalNumber, EmptyNil: true}

// appendCanonical appends Canonical(*r) to b, writing Record's fields in
// their order with their JSON names, or reports false where it leaves the
// record to canonicalJSON. (TestCanonicalMatchesOracle fills every field of
// Record, so a field added to it and not here fails it.)
func appendCanonical(b []byte, r *Record) ([]byte, bool) {
	at := r.OccurredAt.UTC().Truncate(time.Microsecond)
	if y := at.Year(); y < 0 || y > 9999 {
		return b, false // Time.MarshalJSON fails
	}
	b = append(b, `{"id":`...)
	b = jsoncanon.AppendString(b, r.ID)
	b = append(b, `,"chainKey":`...)
	b = jsoncanon.AppendString(b, r.ChainKey)
	b = append(b, `,"workspaceId":`...)
	b = appendNullable(b, r.WorkspaceID)
	b = append(b, `,"actorId":`...)
	b = appendNullable(b, r.ActorID)
	b = append(b, `,"action":`...)
	b = jsoncanon.AppendString(b, r.Action)
	b = append(b, `,"entityType":`...)
	b = jsoncanon.AppendString(b, r.EntityType)
	b = append(b, `,"entityId":`...)
	b = jsoncanon.AppendString(b, r.EntityID)
	b = append(b, `,"occurredAt":"`...)
	b = at.AppendFormat(b, time.RFC3339Nano) // as Time.MarshalJSON
	b = append(b, `","ip":`...)
	b = appendNullable(b, r.IP)
	b = append(b, `,"userAgent":`...)
	b = appendNullable(b, r.UserAgent)
	b = append(b, `,"requestId":`...)
	b = appendNullable(b, r.RequestID)
	b = append(b, `,"metadata":`...)
	b, ok := canonicalMetadata.Append(b, map[string]any(r.Metadata))
	if !ok {
		return b, false
	}
	if r.TraceID != nil {
		b = append(b, `,"traceId":`...)
		b = jsoncanon.AppendString(b, *r.TraceID)
	}
	return append(b, '}'), true
}

// appendNullable appends a *string as json.Marshal writes it.
func appendNullable(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsoncanon.AppendString(b, *s)
}

// appendCanonicalNumber appends canonicalNumber(s), or reports false where
// that fails. It reads the literals of JSON's grammar (with at most 9
// exponent digits) itself, without allocating, and leaves anything else to
// canonicalNumber (FuzzCanonicalNumber compares them).
func appendCanonicalNumber(dst []byte, s string) ([]byte, bool) {
	lit, neg := s, false
	if len(s) > 0 && s[0] == '-' {
		neg, s = true, s[1:]
	}
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	intPart, frac := s[:i], ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && '0' <= s[j] && s[j] <= '9' {
			j++
		}
		frac, i = s[i+1:j], j
	}
	exp := 0
	if i < len(s) {
		j := i + 1
		if s[i] != 'e' && s[i] != 'E' {
			return appendCanonicalSlow(dst, lit)
		}
		expNeg := false
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			expNeg = s[j] == '-'
			j++
		}
		if j == len(s) || len(s)-j > 9 {
			return appendCanonicalSlow(dst, lit)
		}
		for ; j < len(s); j++ {
			if s[j] < '0' || s[j] > '9' {
				return appendCanonicalSlow(dst, lit)
			}
			exp = exp*10 + int(s[j]-'0')
		}
		if expNeg {
			exp = -exp
		}
	}
	if intPart == "" && frac == "" {
		return dst, false
	}
	start := len(dst)
	if neg {
		dst = append(dst, '-')
	}
	at := len(dst)
	dst = append(dst, intPart...)
	dst = append(dst, frac...)
	digits := dst[at:]
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	if lead == len(digits) {
		return append(dst[:start], '0'), true // every zero is 0, -0 too
	}
	trail := 0
	for digits[len(digits)-1-trail] == '0' {
		trail++
	}
	dst = dst[:at+copy(digits, digits[lead:len(digits)-trail])]
	if exp += trail - len(frac); exp != 0 {
		dst = append(dst, 'e')
		dst = strconv.AppendInt(dst, int64(exp), 10)
	}
	return dst, true
}

// appendCanonicalSlow appends canonicalNumber(s), or reports false where
// that fails.
func appendCanonicalSlow(dst []byte, s string) ([]byte, bool) {
	n, err := canonicalNumber(s)
	if err != nil {
		return dst, false
	}
	return append(dst, n...), true
}

// canonicalJSON is Canonical by encoding/json: canonicalValue's copy of the
// metadata, and json.Marshal of the record.
func canonicalJSON(r Record) ([]byte, error) {
	r.OccurredAt = r.OccurredAt.UTC().Truncate(time.Microsecond)
	meta, err := canonicalValue(map[string]any(r.Metadata))
	if err != nil {
		return nil, err
	}
	r.Metadata, _ = meta.(map[string]any)
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("audit: encode: %w", err)
	}
	return b, nil
}

// canonicalValue returns a copy of a decoded JSON value with every number in
// canonical form. Values other than JSON's (which NormalizeMetadata never leaves)
// are an error.
func canonicalValue(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, string:
		return v, nil
	case json.Number:
		n, err := canonicalNumber(string(v))
		return json.Number(n), err
	case float64:
		n, err := canonicalNumber(strconv.FormatFloat(v, 'g', -1, 64))
		return json.Number(n), err
	case map[string]any:
		if v == nil {
			return map[string]any{}, nil
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			c, err := canonicalValue(e)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			c, err := canonicalValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("audit: canonical: unexpected %T in metadata", v)
}

// canonicalNumber rewrites a JSON number literal as D or DeE, where D is the
// significant digits without leading or trailing zeros (with a leading - for a
// negative value) and E the power of ten: every literal of the same value has
// the same form ("1.50", "15e-1" and "1.5E0" are all "15e-1"; "-0" is "0").
func canonicalNumber(s string) (string, error) {
	bad := fmt.Errorf("audit: canonical: %q is not a JSON number", s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expPart := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expPart = s[:i], s[i+1:]
	}
	exp := 0
	if expPart != "" || len(mant) < len(s) {
		e, err := strconv.Atoi(strings.TrimPrefix(expPart, "+"))
		if err != nil {
			return "", bad
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if digits == "" {
		return "", bad
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", bad
		}
	}
	exp -= len(frac)
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	out := trimmed
	if neg {
		out = "-" + out
	}
	if exp != 0 {
		out += "e" + strconv.Itoa(exp)
	}
	return out, nil
}
