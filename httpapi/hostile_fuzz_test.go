package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/schema"
)

// FuzzHostileInput drives every argument of the schema (every input field of
// an input object argument on its own), the headers that reach the database
// or the logs and the query parameters of /audit/export with hostile values,
// through the real HTTP handler and Postgres, and fails on any INTERNAL error
// or 5xx. The arguments come from the schema itself, so a field added later is
// covered without editing this test. Each call is made as a signed-in OWNER
// of a workspace with a member, a project, a task and a comment, with every
// other required argument valid, so that calls reach the store.
//
// An input (s, inline) goes to every leaf, several calls at a time: s to
// every string, ID, enum and custom scalar (an invalid UTF-8 byte is sent
// raw, an encoded surrogate as a lone \uXXXX escape), and, when it is a JSON
// number (99999999999999999999, -1, 1e3), to every Int and Float as that
// number; written in the document rather than sent as a variable when inline.
// The seed corpus holds every hostile string and number; it runs in plain go
// test (and the fuzzer mutates them with go test -fuzz FuzzHostileInput).
func FuzzHostileInput(f *testing.F) {
	for _, s := range hostileStrings {
		f.Add(s, false)
	}
	for _, s := range inlineStrings {
		f.Add(s, true)
	}
	for _, s := range hostileNumbers {
		f.Add(s, false)
		f.Add(s, true)
	}
	s, err := schema.Load()
	if err != nil {
		f.Fatal(err)
	}
	leaves := hostileLeaves(s)
	hits := &netLog{}
	env := apitest.New(f, func(o *httpapi.Options) {
		// X-Forwarded-For is read only from a trusted proxy: the test is one.
		o.TrustedProxies, _ = httpapi.ParseProxies("127.0.0.1/32,::1/128")
		o.Log = slog.New(hits)
	})
	fx := newFixtures(env)
	f.Fuzz(func(t *testing.T, str string, inline bool) {
		number := isJSONNumber(str)
		var wg sync.WaitGroup
		work := make(chan leaf)
		for range hostileWorkers {
			wg.Go(func() {
				for l := range work {
					in, err := fx.get(t.Context())
					if err != nil {
						t.Errorf("fixture: %v", err)
						continue
					}
					status, body, err := l.send(env, in, str, inline)
					codes, _ := errorCodes(body)
					switch {
					case err != nil:
						t.Errorf("%s: %v", l, err)
					case status >= 500 || slices.Contains(codes, "INTERNAL") || slices.Contains(codes, ""):
						t.Errorf("%s with %s (inline=%v): HTTP %d %.600s", l, abbrev(str), inline, status, body)
					}
					fx.put(in, l.kind == argLeaf && l.op == "mutation" && changed(body))
				}
			})
		}
		for _, l := range leaves {
			if l.kind == argLeaf && isNumber(l.typ) && !number {
				continue // numbers get numbers
			}
			if l.kind != argLeaf && inline {
				continue // nothing to write in a document
			}
			work <- l
		}
		close(work)
		wg.Wait()
		// The safety net (store.InputError) is for paths no check knows yet:
		// a value that reaches it here is a check missing where input enters.
		for _, msg := range hits.take() {
			t.Errorf("with %s (inline=%v), Postgres refused a value no check caught: %s", abbrev(str), inline, msg)
		}
	})
}

// netLog is a slog.Handler that keeps the records of the safety net under
// the input checks ("bad input reached Postgres") and drops the rest.
type netLog struct {
	mu   sync.Mutex
	msgs []string
}

func (*netLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *netLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "bad input reached Postgres" {
		return nil
	}
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}

func (h *netLog) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *netLog) WithGroup(string) slog.Handler { return h }

// take returns the records kept since the last take.
func (h *netLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	msgs := h.msgs
	h.msgs = nil
	return msgs
}

// hostileWorkers is how many calls FuzzHostileInput makes at a time: most
// wait on a commit.
const hostileWorkers = 6

// changed reports whether a mutation's answer has data, so may have changed
// the fixture it ran on.
func changed(body []byte) bool {
	var r struct {
		Data map[string]any `json:"data"`
	}
	if json.Unmarshal(body, &r) != nil {
		return true
	}
	for _, v := range r.Data {
		if v != nil {
			return true
		}
	}
	return false
}

// abbrev shows a hostile string short enough for a failure message.
func abbrev(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", s[:80], len(s))
	}
	return strconv.Quote(s)
}

// hostileStrings are what every String, ID, Time and enum argument gets.
var hostileStrings = func() []string {
	rnd := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 1_000_000) // under the 1 MiB body limit, and incompressible
	for i := range big {
		big[i] = byte('a' + rnd.IntN(26))
	}
	return []string{
		"", " ", "\x00", "a\x00b", "%00", "\\u0000",
		"\xff", "a\xc3(b", // invalid UTF-8: the transport refuses the body
		"\xed\xa0\x80", "x\xed\xb0\x80y", // lone surrogates, sent as \ud800 and \udc00
		"'; DROP TABLE tasks; --", `" OR 1=1 --`, `\`, "%", "_", "*", "task.*", "*.x", "a,b",
		"\u202e\u200b\u200d\ufeffRTL", "مرحبا", "🙂e\u0301", "\x01\x1f\x7f\t\r\n",
		"<script>alert(1)</script>", "=cmd|' /C calc'!A0",
		"00000000-0000-0000-0000-000000000000", "urn:uuid:00000000-0000-0000-0000-000000000000",
		"{00000000-0000-0000-0000-000000000000}", "00000000000000000000000000000000", "ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ",
		"1", "-1", strings.Repeat("f", 100_000),
		"OWNER", "DONE", "URGENT",
		"2026-13-45T99:99:99Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999+14:00", "0001-01-01T00:00:00-23:59",
		"eyJ0IjoiMDAwMS0wMS0wMVQwMDowMDowMFoiLCJpIjoiXHUwMDAwIiwicyI6IiJ9", // a cursor with a NUL id
		string(big),
	}
}()

// hostileNumbers are what every Int and Float argument gets (and every
// string too): out of every range, past int64, not integers.
var hostileNumbers = []string{"-1", "0", "101", "2147483648", "-2147483649", "9223372036854775807",
	"-9223372036854775808", "99999999999999999999", "-99999999999999999999", "1e3", "1.5", "-0"}

// isJSONNumber reports whether s is a JSON number.
func isJSONNumber(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// inlineStrings are the hostile strings also written in the document: the
// ones whose GraphQL literal takes another way through the server than JSON.
var inlineStrings = []string{"\x00", "a\x00b", "\xed\xa0\x80", `\`, "'; DROP TABLE tasks; --", "🙂e\u0301"}

// leafKind is where a leaf's value goes.
type leafKind int

const (
	argLeaf    leafKind = iota // an argument, or an input field of one
	headerLeaf                 // a request header of a mutation
	exportLeaf                 // a query parameter of /audit/export
)

// leaf is one place a hostile value is put.
type leaf struct {
	kind   leafKind
	schema *ast.Schema
	// op is "query" or "mutation"; prefix the fields from the root to the
	// type that has field; arg the argument and path the input fields below
	// it that lead to the leaf, whose type is typ.
	op     string
	prefix []*ast.FieldDefinition
	field  *ast.FieldDefinition
	arg    *ast.ArgumentDefinition
	path   []string
	typ    *ast.Type
	// name is the header or query parameter.
	name string
}

// String names the leaf.
func (l leaf) String() string {
	switch l.kind {
	case headerLeaf:
		return "header " + l.name
	case exportLeaf:
		return "/audit/export?" + l.name
	}
	var b strings.Builder
	for _, p := range l.prefix {
		b.WriteString(p.Name + ".")
	}
	b.WriteString(l.field.Name + "(" + strings.Join(append([]string{l.arg.Name}, l.path...), ".") + ": " + l.typ.String() + ")")
	return l.op + " " + b.String()
}

// isNumber reports whether t is Int or Float, or a list of them.
func isNumber(t *ast.Type) bool {
	for t.Elem != nil {
		t = t.Elem
	}
	return t.NamedType == "Int" || t.NamedType == "Float"
}

// headerLeaves are the request headers that reach the database or the logs.
var headerLeaves = []string{"User-Agent", "X-Request-ID", "Idempotency-Key", "X-Forwarded-For"}

// exportParams are the query parameters of /audit/export.
var exportParams = []string{"workspaceId", "format", "actions", "actorId", "entityType", "entityId", "since", "until"}

// hostileLeaves lists every argument leaf of the schema: each argument of a
// field of Query, Mutation and of every object type reached from Query (the
// input fields of an input object argument one by one), then the headers and
// the export's parameters.
func hostileLeaves(s *ast.Schema) []leaf {
	prefixes := pathsFromQuery(s)
	var out []leaf
	for _, name := range slices.Sorted(maps.Keys(s.Types)) {
		def := s.Types[name]
		if def.Kind != ast.Object || strings.HasPrefix(name, "__") {
			continue
		}
		base := leaf{kind: argLeaf, schema: s, op: "query"}
		switch {
		case s.Mutation != nil && name == s.Mutation.Name:
			base.op = "mutation"
		case name == s.Query.Name:
		default:
			prefix, ok := prefixes[name]
			if !ok {
				continue // not reachable from Query
			}
			base.prefix = prefix
		}
		for _, f := range def.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			for _, a := range f.Arguments {
				l := base
				l.field, l.arg = f, a
				out = append(out, inputLeaves(s, l, a.Type, nil, map[string]bool{})...)
			}
		}
	}
	for _, h := range headerLeaves {
		out = append(out, leaf{kind: headerLeaf, schema: s, name: h})
	}
	for _, p := range exportParams {
		out = append(out, leaf{kind: exportLeaf, schema: s, name: p})
	}
	return out
}

// inputLeaves returns l at type t, or, when t is an input object, a leaf for
// each of its fields (recursively; an input type met again on the way is a
// leaf itself).
func inputLeaves(s *ast.Schema, l leaf, t *ast.Type, path []string, seen map[string]bool) []leaf {
	def := s.Types[t.Name()]
	if def == nil || def.Kind != ast.InputObject || seen[def.Name] || t.Elem != nil {
		l.path, l.typ = slices.Clone(path), t
		return []leaf{l}
	}
	seen[def.Name] = true
	defer delete(seen, def.Name)
	var out []leaf
	for _, f := range def.Fields {
		out = append(out, inputLeaves(s, l, f.Type, append(slices.Clip(path), f.Name), seen)...)
	}
	return out
}

// pathsFromQuery finds, for every object type reachable from Query, the
// shortest list of fields from Query to it.
func pathsFromQuery(s *ast.Schema) map[string][]*ast.FieldDefinition {
	paths := map[string][]*ast.FieldDefinition{s.Query.Name: nil}
	queue := []string{s.Query.Name}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		for _, f := range s.Types[name].Fields {
			next := s.Types[f.Type.Name()]
			if strings.HasPrefix(f.Name, "__") || next == nil || next.Kind != ast.Object {
				continue
			}
			if _, ok := paths[next.Name]; ok {
				continue
			}
			paths[next.Name] = append(slices.Clip(paths[name]), f)
			queue = append(queue, next.Name)
		}
	}
	return paths
}

// value is an argument value that renders both as JSON (a variable) and as a
// GraphQL literal.
type value struct {
	text   string // a string (already quoted and escaped), number or enum name
	enum   bool
	list   []value
	fields []field
	isList bool
	isObj  bool
}

type field struct {
	name string
	v    value
}

func (v value) json() string { return v.render(true) }

func (v value) literal() string { return v.render(false) }

func (v value) render(asJSON bool) string {
	switch {
	case v.isList:
		parts := make([]string, len(v.list))
		for i, e := range v.list {
			parts[i] = e.render(asJSON)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case v.isObj:
		parts := make([]string, len(v.fields))
		for i, f := range v.fields {
			name := f.name
			if asJSON {
				name = strconv.Quote(name)
			}
			parts[i] = name + ":" + f.v.render(asJSON)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case v.enum && asJSON:
		return strconv.Quote(v.text)
	}
	return v.text
}

// str is a string value: s quoted with the escapes JSON and GraphQL share.
// Invalid UTF-8 stays raw (JSON cannot carry it: the body is refused), and
// an encoded UTF-16 surrogate (ED A0..BF xx), which is not UTF-8, becomes the
// \uXXXX escape of a lone surrogate.
func str(s string) value {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF {
			r := rune(c&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
			fmt.Fprintf(&b, `\u%04x`, r)
			i += 3
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c) // UTF-8 or not, as it is
		}
		i++
	}
	b.WriteByte('"')
	return value{text: b.String()}
}

// hostile is the value of the leaf's own type t carrying text: a number for
// a number (text is one), an enum value when text names one, else a string.
func hostile(s *ast.Schema, t *ast.Type, text string) value {
	if t.Elem != nil {
		return value{isList: true, list: []value{hostile(s, t.Elem, text)}}
	}
	if def := s.Types[t.NamedType]; isNumber(t) || def != nil && def.Kind == ast.Enum && def.EnumValues.ForName(text) != nil {
		return value{text: text, enum: !isNumber(t)}
	}
	return str(text)
}

// fixture is the world of one call: a signed-in OWNER (token) of a workspace
// with a MEMBER, a project, a task assigned to the member and a comment, and
// a user who is not a member (outsider).
type fixture struct {
	token                             string
	owner, member, outsider           string // user ids
	ownerEmail, outsiderEmail         string
	workspace, project, task, comment string
}

// fixtures makes fixtures in one database, and keeps those no call changed
// for the next calls.
type fixtures struct {
	env   *apitest.Env
	hash  string // of hostilePassword
	seq   atomic.Int64
	clean chan fixture
}

const hostilePassword = "correct horse battery"

func newFixtures(env *apitest.Env) *fixtures {
	return &fixtures{env: env, hash: auth.HashPassword(hostilePassword, auth.FastPasswordParams),
		clean: make(chan fixture, hostileWorkers)}
}

// newFixture writes one fixture in env's database.
func newFixture(t testing.TB, env *apitest.Env) fixture {
	t.Helper()
	fx, err := newFixtures(env).make(t.Context())
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return fx
}

// get returns a fixture no call has changed.
func (fs *fixtures) get(ctx context.Context) (fixture, error) {
	select {
	case fx := <-fs.clean:
		return fx, nil
	default:
		return fs.make(ctx)
	}
}

// put gives back a fixture after a call; one the call may have changed
// (a mutation that answered with data) is dropped.
func (fs *fixtures) put(fx fixture, changed bool) {
	if changed {
		return
	}
	select {
	case fs.clean <- fx:
	default:
	}
}

// make writes a fresh fixture in one statement (committed without waiting
// for the disk: a test's fixture need not survive a crash).
func (fs *fixtures) make(ctx context.Context) (fixture, error) {
	n := fs.seq.Add(1)
	run := uuid.NewString()[:8]
	fx := fixture{
		token:         auth.NewToken(),
		ownerEmail:    fmt.Sprintf("owner-%s-%d@example.com", run, n),
		outsiderEmail: fmt.Sprintf("outsider-%s-%d@example.com", run, n),
	}
	memberEmail := fmt.Sprintf("member-%s-%d@example.com", run, n)
	err := pgx.BeginFunc(ctx, fs.env.DB.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `WITH
		u AS (INSERT INTO users (email, name, password_hash) VALUES ($1, 'Owner', $4), ($2, 'Member', $4), ($3, 'Outsider', $4)
			RETURNING id, email),
		o AS (SELECT id FROM u WHERE email = $1),
		m AS (SELECT id FROM u WHERE email = $2),
		x AS (SELECT id FROM u WHERE email = $3),
		tok AS (INSERT INTO tokens (token_hash, user_id, expires_at) SELECT $5, id, now() + interval '1 day' FROM o),
		w AS (INSERT INTO workspaces (name) VALUES ('W') RETURNING id),
		mem AS (INSERT INTO members (workspace_id, user_id, role)
			SELECT w.id, o.id, 'OWNER' FROM w, o UNION ALL SELECT w.id, m.id, 'MEMBER' FROM w, m),
		p AS (INSERT INTO projects (workspace_id, name) SELECT id, 'P' FROM w RETURNING id),
		t AS (INSERT INTO tasks (project_id, workspace_id, title, created_by, assignee_id)
			SELECT p.id, w.id, 'T', o.id, m.id FROM p, w, o, m RETURNING id),
		c AS (INSERT INTO comments (task_id, workspace_id, author_id, body) SELECT t.id, w.id, o.id, 'C' FROM t, w, o RETURNING id)
		SELECT o.id, m.id, x.id, w.id, p.id, t.id, c.id FROM o, m, x, w, p, t, c`,
			fx.ownerEmail, memberEmail, fx.outsiderEmail, fs.hash, auth.HashToken(fx.token)).
			Scan(&fx.owner, &fx.member, &fx.outsider, &fx.workspace, &fx.project, &fx.task, &fx.comment)
	})
	return fx, err
}

// id is a valid id for the argument or input field name of field: the
// fixture's thing it names, else a fresh id.
func (fx fixture) id(fieldName, name string) string {
	byName := map[string]string{"workspaceid": fx.workspace, "projectid": fx.project, "taskid": fx.task,
		"commentid": fx.comment, "userid": fx.member, "assigneeid": fx.member, "actorid": fx.owner, "entityid": fx.task}
	if id, ok := byName[strings.ToLower(name)]; ok {
		return id
	}
	if name == "id" {
		f := strings.ToLower(fieldName)
		for _, k := range []struct{ word, id string }{{"comment", fx.comment}, {"task", fx.task}, {"project", fx.project},
			{"workspace", fx.workspace}, {"member", fx.member}, {"user", fx.member}} {
			if strings.Contains(f, k.word) {
				return k.id
			}
		}
	}
	return uuid.NewString()
}

// valid is a valid value of type t for the argument or input field name of
// field.
func (fx fixture) valid(s *ast.Schema, fieldName, name string, t *ast.Type) value {
	if t.Elem != nil {
		return value{isList: true, list: []value{fx.valid(s, fieldName, name, t.Elem)}}
	}
	def := s.Types[t.NamedType]
	switch {
	case def != nil && def.Kind == ast.InputObject:
		v := value{isObj: true}
		for _, f := range def.Fields {
			if f.Type.NonNull && f.DefaultValue == nil {
				v.fields = append(v.fields, field{f.Name, fx.valid(s, fieldName, f.Name, f.Type)})
			}
		}
		return v
	case def != nil && def.Kind == ast.Enum:
		return value{text: def.EnumValues[0].Name, enum: true}
	}
	switch t.NamedType {
	case "Int":
		return value{text: "5"}
	case "Float":
		return value{text: "1.5"}
	case "Boolean":
		return value{text: "false"}
	case "ID":
		return str(fx.id(fieldName, name))
	case "Time":
		return str("2030-01-02T03:04:05Z")
	}
	switch strings.ToLower(name) {
	case "email":
		switch f := strings.ToLower(fieldName); {
		case strings.Contains(f, "register"):
			return str("new-" + uuid.NewString() + "@example.com")
		case strings.Contains(f, "add"), strings.Contains(f, "invite"):
			return str(fx.outsiderEmail)
		}
		return str(fx.ownerEmail)
	case "password":
		return str(hostilePassword)
	}
	return str("ok")
}

// args renders the arguments of f as name: $var, adding their definitions
// and JSON values: the required ones valid, the leaf's argument (when f is
// the leaf's field) hostile, written in the document when inline.
func (l leaf) args(fx fixture, f *ast.FieldDefinition, hostileArg *value, inline bool,
	defs *[]string, vars *[]string) string {
	var parts []string
	for _, a := range f.Arguments {
		var v value
		switch {
		case hostileArg != nil && a == l.arg:
			v = *hostileArg
			if inline {
				parts = append(parts, a.Name+": "+v.literal())
				continue
			}
		case a.Type.NonNull && a.DefaultValue == nil:
			v = fx.valid(l.schema, f.Name, a.Name, a.Type)
		default:
			continue
		}
		name := fmt.Sprintf("v%d", len(*defs))
		*defs = append(*defs, "$"+name+": "+a.Type.String())
		*vars = append(*vars, strconv.Quote(name)+":"+v.json())
		parts = append(parts, a.Name+": $"+name)
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// argValue is the leaf's whole argument: the hostile value at the leaf's
// path, the required input fields around it valid.
func (l leaf) argValue(fx fixture, t *ast.Type, path []string, s string) value {
	if len(path) == 0 {
		return hostile(l.schema, t, s)
	}
	def := l.schema.Types[t.Name()]
	v := value{isObj: true}
	for _, f := range def.Fields {
		switch {
		case f.Name == path[0]:
			v.fields = append(v.fields, field{f.Name, l.argValue(fx, f.Type, path[1:], s)})
		case f.Type.NonNull && f.DefaultValue == nil:
			v.fields = append(v.fields, field{f.Name, fx.valid(l.schema, l.field.Name, f.Name, f.Type)})
		}
	}
	return v
}

// selection selects __typename and the scalar fields (without required
// arguments) of an object type; nothing of a scalar.
func selection(s *ast.Schema, t *ast.Type) string {
	def := s.Types[t.Name()]
	if def == nil || def.Kind != ast.Object && def.Kind != ast.Interface {
		return ""
	}
	sel := []string{"__typename"}
	for _, f := range def.Fields {
		inner := s.Types[f.Type.Name()]
		if strings.HasPrefix(f.Name, "__") || inner == nil || inner.Kind != ast.Scalar && inner.Kind != ast.Enum {
			continue
		}
		required := false
		for _, a := range f.Arguments {
			required = required || a.Type.NonNull && a.DefaultValue == nil
		}
		if !required {
			sel = append(sel, f.Name)
		}
	}
	return " { " + strings.Join(sel, " ") + " }"
}

// body is the JSON body of the leaf's call.
func (l leaf) body(fx fixture, s string, inline bool) []byte {
	var defs, vars []string
	h := l.argValue(fx, l.arg.Type, l.path, s)
	var doc strings.Builder
	for _, p := range l.prefix {
		doc.WriteString(p.Name + l.args(fx, p, nil, false, &defs, &vars) + " { ")
	}
	doc.WriteString(l.field.Name + l.args(fx, l.field, &h, inline, &defs, &vars) + selection(l.schema, l.field.Type))
	doc.WriteString(strings.Repeat(" }", len(l.prefix)))
	op := l.op
	if len(defs) > 0 {
		op += "(" + strings.Join(defs, ", ") + ")"
	}
	query := op + " { " + doc.String() + " }"
	// The query is JSON-quoted by hand too, so that the literal's escapes and
	// raw bytes reach the server as they are.
	return []byte(`{"query":` + str(query).text + `,"variables":{` + strings.Join(vars, ",") + `}}`)
}

// send makes the leaf's call with s and returns the status and body.
func (l leaf) send(env *apitest.Env, fx fixture, s string, inline bool) (int, []byte, error) {
	switch l.kind {
	case headerLeaf:
		body := []byte(`{"query":"mutation { createWorkspace(input: {name: \"h\"}) { id } }"}`)
		return rawPost(env.Server.Listener.Addr().String(), fx.token, body, l.name+": "+s)
	case exportLeaf:
		q := url.Values{"workspaceId": {fx.workspace}, "format": {"ndjson"}}
		q.Set(l.name, s)
		req, err := http.NewRequest(http.MethodGet, env.Server.URL+"/audit/export?"+q.Encode(), nil)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+fx.token)
		return do(env, req)
	}
	return rawPost(env.Server.Listener.Addr().String(), fx.token, l.body(fx, s, inline))
}

// rawPost posts a GraphQL body over a plain TCP connection, so that bytes no
// Go HTTP client would send (a NUL in a header, invalid UTF-8 in the body)
// reach the server as they are.
func rawPost(addr, token string, body []byte, headers ...string) (int, []byte, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	var req strings.Builder
	fmt.Fprintf(&req, "POST /query HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n", addr, token, len(body))
	for _, h := range headers {
		req.WriteString(h + "\r\n")
	}
	req.WriteString("\r\n")
	// The server may answer before it reads the body (a caller's turn refused
	// at once: 429, nothing ran) and then close, and a body larger than the
	// socket's window is then cut short: the response is read while the body
	// is written, as an HTTP client does, and a write cut short after a
	// response is no error.
	written := make(chan error, 1)
	go func() {
		_, err := conn.Write(append([]byte(req.String()), body...))
		written <- err
	}()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if werr := <-written; werr != nil {
			return 0, nil, werr
		}
		return 0, nil, err
	}
	defer res.Body.Close()
	return readAll(res)
}

// do sends req and returns the status and body.
func do(env *apitest.Env, req *http.Request) (int, []byte, error) {
	res, err := env.Server.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	return readAll(res)
}

// readAll reads the body of res.
func readAll(res *http.Response) (int, []byte, error) {
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}
