package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type sample struct {
	ID        string     `json:"id" audit:"track"`
	Title     string     `json:"title" audit:"track"`
	Due       *time.Time `json:"due" audit:"track"`
	Count     int        `json:"count" audit:"track"`
	Password  string     `json:"-" audit:"secret"`
	UpdatedAt time.Time  `json:"updatedAt" audit:"ignore"`
	hidden    string
}

type untagged struct {
	ID    string `json:"id" audit:"track"`
	Token string `json:"token"`
}

func TestSnapshotKeepsTrackedFieldsOnly(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("X", 3600))
	s := sample{ID: "1", Title: "t", Due: &due, Count: 3, Password: "hunter2", UpdatedAt: time.Now(), hidden: "h"}
	got := Snapshot(&s)
	want := map[string]any{"id": "1", "title": "t", "due": "2026-03-01T11:00:00Z", "count": 3}
	if len(got) != len(want) {
		t.Fatalf("Snapshot = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Snapshot[%q] = %#v, want %#v", k, got[k], v)
		}
	}
	if _, ok := Snapshot(s)["due"]; !ok {
		t.Error("Snapshot of a value (not a pointer) lost a field")
	}
	s.Due = nil
	if v, ok := Snapshot(s)["due"]; !ok || v != nil {
		t.Errorf("nil pointer field = %#v, %v; want nil, present", v, ok)
	}
	b, _ := json.Marshal(got)
	if bytes.Contains(b, []byte("hunter2")) || bytes.Contains(b, []byte("updatedAt")) {
		t.Errorf("snapshot leaks a secret or ignored field: %s", b)
	}
}

func TestChangesRules(t *testing.T) {
	t.Parallel()
	d1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d2 := d1.In(time.FixedZone("Y", -7200)) // the same instant in another zone
	before := sample{ID: "1", Title: "a", Due: &d1, Count: 1, Password: "old", UpdatedAt: d1}
	after := before
	after.Due = &d2
	if c := Changes(before, after); len(c) != 0 {
		t.Fatalf("same instant in another zone is a change: %v", c)
	}
	after = sample{ID: "1", Title: "b", Due: nil, Count: 2, Password: "new-secret", UpdatedAt: d1.Add(time.Hour)}
	c := Changes(&before, &after)
	b, _ := json.Marshal(c)
	var got map[string]map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["title"]["from"] != "a" || got["title"]["to"] != "b" {
		t.Errorf("title change = %v", got["title"])
	}
	if got["due"]["from"] != "2026-01-01T00:00:00Z" || got["due"]["to"] != nil {
		t.Errorf("due change = %v", got["due"])
	}
	if got["count"]["from"] != 1.0 || got["count"]["to"] != 2.0 {
		t.Errorf("count change = %v", got["count"])
	}
	if _, ok := got["updatedAt"]; ok {
		t.Error("ignored field recorded")
	}
	if got["password"]["from"] != "[redacted]" || got["password"]["to"] != "[redacted]" {
		t.Errorf("secret change = %v", got["password"])
	}
	if bytes.Contains(b, []byte("old")) || bytes.Contains(b, []byte("new-secret")) {
		t.Errorf("Changes leaks a secret: %s", b)
	}
}

func TestFieldWithoutRuleIsCaught(t *testing.T) {
	t.Parallel()
	if err := Check(untagged{}); err == nil || !strings.Contains(err.Error(), "Token") {
		t.Fatalf("Check(untagged) = %v, want an error naming Token", err)
	}
	if err := Check(sample{}); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"Snapshot": func() { Snapshot(untagged{}) },
		"Changes":  func() { Changes(untagged{}, untagged{}) },
		"types":    func() { Changes(sample{}, &sample{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestCanonicalNumber(t *testing.T) {
	t.Parallel()
	groups := [][]string{
		{"0", "-0", "0.000", "0e10", "-0.0E-3"},
		{"1", "1.0", "1.000", "1e0", "10e-1", "0.1e1", "100E-2"},
		{"100", "1e2", "1E+2", "100.00", "0.001e5"},
		{"1.5", "1.50", "15e-1", "0.15E1"},
		{"-42.125", "-4212.5e-2", "-42.1250"},
		{"1000000000000000000000", "1e21", "1e+21"},
		{"0.0000001", "1e-7", "1E-07"},
		{"123456789012345678901234567890.5", "1234567890123456789012345678905e-1"},
	}
	seen := map[string]string{}
	for _, g := range groups {
		want, err := canonicalNumber(g[0])
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[want]; dup {
			t.Fatalf("%s and %s have the same canonical form %s", g[0], other, want)
		}
		seen[want] = g[0]
		for _, s := range g[1:] {
			got, err := canonicalNumber(s)
			if err != nil || got != want {
				t.Errorf("canonicalNumber(%q) = %q, %v; want %q (as %q)", s, got, err, want, g[0])
			}
		}
	}
	for _, bad := range []string{"", "-", "1x", "e5", "1e", "1.2.3"} {
		if _, err := canonicalNumber(bad); err == nil {
			t.Errorf("canonicalNumber(%q) accepted", bad)
		}
	}
}

// The hash is the same for metadata as appended and as jsonb gives it back
// (numbers rewritten, keys reordered, whitespace gone).
func TestHashStableAcrossEquivalentEncodings(t *testing.T) {
	t.Parallel()
	ws := "0195f1a2-0000-7000-8000-000000000001"
	rec := func(meta string) Record {
		m, err := DecodeMetadata([]byte(meta))
		if err != nil {
			t.Fatal(err)
		}
		return Record{ID: "0195f1a2-0000-7000-8000-000000000002", ChainKey: ws, WorkspaceID: &ws, Action: "task.updated",
			EntityType: "task", EntityID: "x", OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("Z", 3600)),
			Metadata: m}
	}
	a, err := Hash([]byte("prev"), rec(`{"b": [1e2, 1.50, {"z": null, "a": "é\u2028<&>"}], "a": -0.0}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Hash([]byte("prev"), rec(`{"a":0,"b":[100,1.5,{"a":"é\u2028<&>","z":null}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("equivalent metadata hashes differently")
	}
	r := rec(`{"a":0}`)
	r.OccurredAt = r.OccurredAt.UTC().Truncate(time.Microsecond)
	c, _ := Hash([]byte("prev"), r)
	d, _ := Hash([]byte("prev"), rec(`{"a":0}`))
	if !bytes.Equal(c, d) {
		t.Fatal("the time zone or sub-microsecond digits change the hash")
	}
	for name, mutate := range map[string]func(*Record){
		"metadata value": func(r *Record) { r.Metadata["a"] = json.Number("1") },
		"action":         func(r *Record) { r.Action = "task.deleted" },
		"time":           func(r *Record) { r.OccurredAt = r.OccurredAt.Add(time.Microsecond) },
		"workspace":      func(r *Record) { r.WorkspaceID = nil },
		"ip":             func(r *Record) { ip := "10.0.0.1"; r.IP = &ip },
	} {
		r := rec(`{"a":0}`)
		mutate(&r)
		e, _ := Hash([]byte("prev"), r)
		if bytes.Equal(e, d) {
			t.Errorf("changing the %s does not change the hash", name)
		}
	}
	e, _ := Hash([]byte("other"), rec(`{"a":0}`))
	if bytes.Equal(e, d) {
		t.Error("the previous hash is not covered")
	}
}

func TestNormalizeMetadata(t *testing.T) {
	t.Parallel()
	m, err := NormalizeMetadata(map[string]any{"n": 1.5, "s": "a\x00b", "k\x00": []any{"\xff"}, "i": int64(1) << 60})
	if err != nil {
		t.Fatal(err)
	}
	if m["s"] != "a\uFFFDb" {
		t.Errorf("NUL kept: %q", m["s"])
	}
	if _, ok := m["k\uFFFD"]; !ok {
		t.Errorf("NUL kept in a key: %v", m)
	}
	if m["n"] != json.Number("1.5") || m["i"] != json.Number("1152921504606846976") {
		t.Errorf("numbers = %#v, %#v", m["n"], m["i"])
	}
	if m, err := NormalizeMetadata(nil); err != nil || m == nil || len(m) != 0 {
		t.Errorf("NormalizeMetadata(nil) = %v, %v", m, err)
	}
}

func TestCleanText(t *testing.T) {
	t.Parallel()
	if got := CleanText("a\x00b\xffc"); got != "a\uFFFDb\uFFFDc" {
		t.Errorf("CleanText = %q", got)
	}
	long := strings.Repeat("é", MaxTextLen) // 2 bytes each
	got := CleanText(long)
	if len(got) > MaxTextLen || !utf8.ValidString(got) || len(got) < MaxTextLen-1 {
		t.Errorf("CleanText(long) has %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

func TestEventChainKey(t *testing.T) {
	t.Parallel()
	ws, u := "w", "u"
	cases := []struct {
		ev   Event
		want string
	}{
		{Event{WorkspaceID: &ws, ActorID: &u, Action: "task.created", EntityID: "t"}, "w"},
		{Event{ActorID: &u, Action: "user.logged_in", EntityID: "u2"}, "user:u2"},
		{Event{ActorID: &u, Action: "user.logged_in"}, "user:u"},
		{Event{Action: "user.login_failed"}, "anonymous"},
	}
	for _, c := range cases {
		if got := c.ev.ChainKey(); got != c.want {
			t.Errorf("%+v: ChainKey = %q, want %q", c.ev, got, c.want)
		}
	}
	if (Event{Action: "member.role_changed"}).EntityType() != "member" {
		t.Error("EntityType")
	}
}

// goldenRecord is an event as the store wrote it before audit events had a
// trace id.
func goldenRecord() Record {
	ws, actor, ip, ua, rid := "0190b6a4-1111-7000-8000-000000000001", "0190b6a4-2222-7000-8000-000000000002", "203.0.113.7", "curl/8", "req-1"
	return Record{ID: "0190b6a4-3333-7000-8000-000000000003", ChainKey: ws, WorkspaceID: &ws, ActorID: &actor,
		Action: "task.updated", EntityType: "task", EntityID: "0190b6a4-4444-7000-8000-000000000004",
		OccurredAt: time.Date(2026, 11, 30, 12, 34, 56, 123456000, time.UTC), IP: &ip, UserAgent: &ua, RequestID: &rid,
		Metadata: map[string]any{"changes": map[string]any{"title": map[string]any{"from": "a", "to": "b"}}, "n": 1.5}}
}

// An event without a trace id hashes exactly as before trace ids existed (the
// hash below was computed by the code of that time), so the chains written
// then still verify; a trace id, when there is one, is covered by the hash.
func TestHashOfEventWithoutTraceIDUnchanged(t *testing.T) {
	t.Parallel()
	prev, _ := hex.DecodeString("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	r := goldenRecord()
	h, err := Hash(prev, r)
	if err != nil {
		t.Fatal(err)
	}
	const before = "028e932e29ab5fb6e223041dfe41556ecb31e00fae2456bff223af7324f5660e"
	if got := hex.EncodeToString(h); got != before {
		t.Fatalf("hash of an event without trace id = %s, want %s (as written before trace ids)", got, before)
	}
	if b, _ := Canonical(r); bytes.Contains(b, []byte("traceId")) {
		t.Fatalf("canonical form names traceId: %s", b)
	}
	seen := map[string]bool{hex.EncodeToString(h): true}
	for _, id := range []string{"4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4737", ""} {
		r.TraceID = &id
		h, err := Hash(prev, r)
		if err != nil {
			t.Fatal(err)
		}
		if seen[hex.EncodeToString(h)] {
			t.Errorf("trace id %q does not change the hash", id)
		}
		seen[hex.EncodeToString(h)] = true
	}
}

// NormalizeMetadata without the round trip through JSON gives what the round
// trip gives, for snapshots, changes and everything that falls back to it
// (numbers, NUL, invalid UTF-8, other types), and never shares the caller's
// maps.
func TestNormalizeMetadataWithoutTheRoundTrip(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
	before := sample{ID: "1", Title: "<a & b>", Count: 1, Password: "p"}
	after := sample{ID: "1", Title: "t\u2028", Due: &due, Count: 2, Password: "q"}
	cases := map[string]map[string]any{
		"snapshot":         Snapshot(after),
		"snapshot, nil":    Snapshot(before),
		"changes":          {"changes": Changes(before, after)},
		"strings":          {"a": "é", "b": "", "c": "\"\\/\n"},
		"nulls and bools":  {"a": nil, "b": true, "c": false, "m": map[string]any(nil), "s": []any(nil)},
		"nested":           {"a": map[string]any{"b": []any{"x", nil, map[string]any{"c": false}}}, "e": []any{}},
		"change of nils":   {"c": Change{}},
		"number":           {"a": map[string]any{"n": 2}},
		"number in change": {"c": Change{From: 1, To: 2.5}},
		"NUL":              {"a": []any{"x\x00"}},
		"NUL key":          {"a\x00": "x"},
		"invalid UTF-8":    {"a": map[string]any{"b": "\xff"}},
		"invalid key":      {"\xfe": "x"},
		"other type":       {"a": []string{"x"}},
		"json.Number":      {"a": json.Number("1e2")},
	}
	for name, m := range cases {
		want, err := normalizeJSON(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := NormalizeMetadata(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) { // not %#v: a json.Number and a string print alike
			t.Errorf("%s:\n got %#v\nwant %#v", name, got, want)
		}
		got["added"] = true
		if _, ok := m["added"]; ok {
			t.Errorf("%s: the result is the caller's map", name)
		}
	}
	// Snapshots and changes of strings, times and nulls take the short way.
	type text struct {
		ID    string     `json:"id" audit:"track"`
		Title *string    `json:"title" audit:"track"`
		Due   *time.Time `json:"due" audit:"track"`
	}
	title := "t"
	for _, m := range []map[string]any{Snapshot(text{ID: "1", Due: &due}), {"changes": Changes(text{ID: "1"}, text{ID: "2", Title: &title, Due: &due})}} {
		if _, ok := decoded(m); !ok {
			t.Errorf("%v takes the round trip", m)
		}
	}
}

// FuzzNormalizeMetadata: for any text as a value and as a key, in a map and
// in a change, NormalizeMetadata gives what the round trip through JSON gives.
func FuzzNormalizeMetadata(f *testing.F) {
	for _, s := range []string{"", "a", "\x00", "\xff", "é", "\u2028<>&", "\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := map[string]any{"v": s, s: []any{s, nil}, "c": Change{From: s, To: map[string]any{s: true}}}
		want, err := normalizeJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NormalizeMetadata(m)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %#v\nwant %#v", got, want)
		}
	})
}

// BenchmarkNormalizeMetadata compares the round trip through JSON with the
// copy, for the snapshot of a created task (what Snapshot gives for
// store.Task).
func BenchmarkNormalizeMetadata(b *testing.B) {
	id := "0193a1f2-7c4e-7d3a-9b1e-4f2a6c8d0e1f"
	m := map[string]any{"id": id, "projectId": id, "workspaceId": id, "title": "Write the quarterly report",
		"description": nil, "status": "TODO", "priority": "MEDIUM", "assigneeId": nil, "dueDate": nil, "createdById": id}
	b.Run("roundTrip", func(b *testing.B) {
		for b.Loop() {
			if _, err := normalizeJSON(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		for b.Loop() {
			if _, err := NormalizeMetadata(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type hook struct {
	ID   string  `json:"id" audit:"track"`
	URL  string  `json:"url" audit:"track,url"`
	Prev *string `json:"prev" audit:"track,url"`
}

// A URL field (track,url) is recorded as scheme://host[:port]/… with the
// SHA-256 of the whole URL beside it, in snapshots and in diffs: never its
// path, query or user information.
func TestURLFieldsAreRedacted(t *testing.T) {
	t.Parallel()
	const u1 = "https://hooks.slack.com/services/T0/B0/SeCrEt?token=QuErY"
	const u2 = "https://hooks.slack.com:8443/services/T1/B1/OtHeR"
	sum := func(s string) string { return URLSha256(s) }
	if h := sum(""); h != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("URLSha256(\"\") = %s", h)
	}
	snap := Snapshot(hook{ID: "1", URL: u1})
	want := map[string]any{"id": "1", "url": "https://hooks.slack.com/…", "urlSha256": sum(u1), "prev": nil, "prevSha256": nil}
	if !reflect.DeepEqual(snap, want) {
		t.Errorf("Snapshot = %#v, want %#v", snap, want)
	}
	c := Changes(hook{ID: "1", URL: u1}, hook{ID: "1", URL: u2, Prev: ptrTo(u1)})
	wantChanges := map[string]any{
		"url":        Change{From: "https://hooks.slack.com/…", To: "https://hooks.slack.com:8443/…"},
		"urlSha256":  Change{From: sum(u1), To: sum(u2)},
		"prev":       Change{From: nil, To: "https://hooks.slack.com/…"},
		"prevSha256": Change{From: nil, To: sum(u1)},
	}
	if !reflect.DeepEqual(c, wantChanges) {
		t.Errorf("Changes = %#v, want %#v", c, wantChanges)
	}
	// Only the query differs: the form shown is the same, the hash is not.
	c = Changes(hook{URL: u1}, hook{URL: u1 + "&x=1"})
	if c["url"] != (Change{From: "https://hooks.slack.com/…", To: "https://hooks.slack.com/…"}) ||
		c["urlSha256"] != (Change{From: sum(u1), To: sum(u1 + "&x=1")}) {
		t.Errorf("a change of the query: %#v", c)
	}
	for _, m := range []map[string]any{snap, c} {
		b, _ := json.Marshal(m)
		for _, secret := range []string{"services", "SeCrEt", "QuErY", "OtHeR", "token"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds %q", b, secret)
			}
		}
	}
	if got := URLFields(&hook{}); !reflect.DeepEqual(got, map[string]bool{"url": true, "prev": true}) {
		t.Errorf("URLFields = %v", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T0/B0/x": "https://hooks.slack.com/…",
		"https://h.example":                        "https://h.example/…",
		"https://h.example/":                       "https://h.example/…",
		"https://h.example?token=x":                "https://h.example/…",
		"https://h.example#frag":                   "https://h.example/…",
		"https://user:pass@h.example:8443/p":       "https://h.example:8443/…",
		"https://a@b@h.example/x@y":                "https://h.example/…",
		"http://[2001:db8::1]:8080/x":              "http://[2001:db8::1]:8080/…",
		"HTTPS://H.Example/x":                      "HTTPS://H.Example/…",
		"https://x://y/z":                          "https://x:/…",
		"a:b://x/y":                                "…",
		"/relative/path":                           "…",
		"":                                         "…",
		"mailto:a@b.example":                       "…",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// A tag option other than url, or url on another rule or on a field that is
// not text, is caught as a missing rule is.
func TestURLOptionMisuseIsCaught(t *testing.T) {
	t.Parallel()
	type badOption struct {
		URL string `json:"url" audit:"track,URL"`
	}
	type onSecret struct {
		URL string `json:"url" audit:"secret,url"`
	}
	type onNumber struct {
		N int `json:"n" audit:"track,url"`
	}
	type clash struct {
		URL string `json:"url" audit:"track,url"`
		Sum string `json:"urlSha256" audit:"track"`
	}
	for _, v := range []any{badOption{}, onSecret{}, onNumber{}, clash{}} {
		if err := Check(v); err == nil {
			t.Errorf("Check(%T) = nil, want an error", v)
		}
	}
	if err := Check(hook{}); err != nil {
		t.Error(err)
	}
}
