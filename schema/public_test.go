package schema

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var (
	update        = flag.Bool("update", false, "rewrite public.json from the schema files when the change is not breaking")
	allowBreaking = flag.Bool("allow-breaking", false, "with -update: rewrite public.json even for breaking changes")
)

const artifact = "public.json"

// TestPublicSchema fails when the schema files break the contract committed in
// public.json, or when public.json is not the introspection result of the
// schema files (refresh it with -update; see docs/schema.md).
func TestPublicSchema(t *testing.T) {
	if !*update { // with -update it writes public.json, which other tests read
		t.Parallel()
	}
	current, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Introspect(current)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(artifact)
	if os.IsNotExist(err) && *update {
		writeArtifact(t, want)
		return
	}
	if err != nil {
		t.Fatalf("%v (create it with `go test ./schema/ -run TestPublicSchema -update`)", err)
	}
	published, err := FromIntrospection(committed)
	if err != nil {
		t.Fatalf("schema/%s: %v", artifact, err)
	}
	cs := Compare(published, current)
	if b := Breaking(cs); len(b) > 0 && !(*update && *allowBreaking) {
		t.Fatalf("the schema files break the published contract (schema/%s):\n%s\n\n"+
			"Clients built against the contract can fail. Make the change additive (add the new, deprecate the old) "+
			"or, if the break is deliberate and agreed, run `go test ./schema/ -run TestPublicSchema -update -allow-breaking` "+
			"and commit schema/%s (see docs/schema.md).", artifact, list(b), artifact)
	}
	if bytes.Equal(committed, want) {
		return
	}
	if *update {
		writeArtifact(t, want)
		t.Logf("updated schema/%s:\n%s", artifact, list(cs))
		return
	}
	detail := list(cs)
	if detail == "" {
		detail = "  (descriptions or deprecation reasons only)"
	}
	t.Fatalf("schema/%s is stale; the schema files changed without breaking it:\n%s\n\n"+
		"Refresh it with `go test ./schema/ -run TestPublicSchema -update` and commit it.", artifact, detail)
}

func writeArtifact(t *testing.T, b []byte) {
	t.Helper()
	if err := os.WriteFile(artifact, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func list(cs []Change) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("  " + c.String() + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// TestIntrospectionRoundTrip checks that public.json is faithful: the schema
// read back from the introspection result of the schema files has no change
// against them, in either direction.
func TestIntrospectionRoundTrip(t *testing.T) {
	t.Parallel()
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Introspect(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromIntrospection(b)
	if err != nil {
		t.Fatal(err)
	}
	if cs := Compare(s, back); len(cs) > 0 {
		t.Errorf("schema files → introspection → schema changed:\n%s", list(cs))
	}
	if cs := Compare(back, s); len(cs) > 0 {
		t.Errorf("introspection → schema files changed:\n%s", list(cs))
	}
	for _, name := range []string{"Query", "Mutation", "Task", "CreateTaskInput", "AuditEventFilter", "Role"} {
		if back.Types[name] == nil {
			t.Errorf("type %s missing after the round trip", name)
		}
	}
	if d := back.Types["CreateTaskInput"].Fields.ForName("status"); d == nil || d.DefaultValue == nil || d.DefaultValue.String() != "TODO" {
		t.Errorf("CreateTaskInput.status default lost in the round trip: %+v", d)
	}
}
