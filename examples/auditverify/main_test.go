package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/httpapi/apitest"
	"taskflow/store"
)

// TestRun checks a real export and checkpoint offline: it passes for the log
// as the server wrote it, and fails for an edited event, a log cut before the
// checkpoint, another key and an edited checkpoint.
func TestRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.SignUp(t, "Owner")
	var ws struct{ CreateWorkspace struct{ ID string } }
	post := func(query string, vars map[string]any, out any) {
		t.Helper()
		res := env.Post(t, owner.Token, query, vars)
		if res.Code() != "" || json.Unmarshal(res.Body.Data, out) != nil {
			t.Fatalf("%s: %s", query, res.Raw)
		}
	}
	post(`mutation { createWorkspace(input: {name: "Audited"}) { id } }`, nil, &ws)
	wsID := ws.CreateWorkspace.ID
	var p struct{ CreateProject struct{ ID string } }
	post(`mutation($ws: ID!) { createProject(input: {workspaceId: $ws, name: "P"}) { id } }`, map[string]any{"ws": wsID}, &p)
	for i := range 3 {
		var task struct{ CreateTask struct{ ID string } }
		post(`mutation($p: ID!, $t: String!) { createTask(input: {projectId: $p, title: $t}) { id } }`,
			map[string]any{"p": p.CreateProject.ID, "t": fmt.Sprintf("task \"%d\" ✓", i)}, &task)
	}
	env.Seal(t)
	if _, err := env.Sealer().Checkpoint(t.Context(), wsID); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var cp map[string]any
	post(`query($ws: ID!) { auditCheckpoint(workspaceId: $ws) { version chainKey position headHash signedAt keyId publicKey signature message } }`,
		map[string]any{"ws": wsID}, &cp)
	cpJSON, _ := json.Marshal(cp["auditCheckpoint"])
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cpPath := write("checkpoint.json", cpJSON)
	pub := audit.EncodePublicKey(env.AuditKey.Public().(ed25519.PublicKey))
	export := func() []byte {
		req, _ := http.NewRequest(http.MethodGet, env.Server.URL+"/audit/export?format=ndjson&workspaceId="+wsID, nil)
		req.Header.Set("Authorization", "Bearer "+owner.Token)
		res, err := env.Server.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("export: %d %s", res.StatusCode, b)
		}
		return b
	}
	check := func(name string, exp []byte, args []string, want int, says string) {
		t.Helper()
		var out bytes.Buffer
		code, err := run(append([]string{"-export", write(name+".ndjson", exp)}, args...), &out)
		if code != want || err != nil || !strings.Contains(out.String(), says) {
			t.Errorf("%s: exit %d (%v), want %d saying %q:\n%s", name, code, err, want, says, out.String())
		}
	}
	good := export()
	// Newest first: workspace.created, project.created, three task.created.
	if n := bytes.Count(good, []byte("\n")); n != 5 {
		t.Fatalf("export of %d events:\n%s", n, good)
	}
	check("intact", good, []string{"-checkpoint", cpPath, "-key", pub}, 0, "5 events: 5 sealed (positions 1 to 5), 0 not sealed yet; checkpoint at position 5")
	check("no checkpoint", good, nil, 0, "OK")
	keyFile := write("key.pub", []byte(pub+"\n"))
	check("key in a file", good, []string{"-checkpoint", cpPath, "-key", "@" + keyFile}, 0, "OK")

	lines := strings.SplitAfter(strings.TrimSuffix(string(good), "\n"), "\n")
	edited := strings.Replace(string(good), `task \"1\" ✓`, `task \"1\" ✗`, 1)
	check("edited event", []byte(edited), []string{"-checkpoint", cpPath, "-key", pub}, 1, "its hash is not the hash of its content")
	check("cut before the checkpoint", []byte(strings.Join(lines[1:], "")), []string{"-checkpoint", cpPath, "-key", pub}, 1,
		"checkpoint at position 5, but the log ends at 4")
	check("middle event gone", []byte(lines[0]+strings.Join(lines[2:], "")), nil, 1, "positions jump from 3 to 5")
	other := audit.EncodePublicKey(audit.GenerateSigningKey().Public().(ed25519.PublicKey))
	check("another key", good, []string{"-checkpoint", cpPath, "-key", other}, 1, "checkpoint: checkpoint was signed by key")
	// Hex is case-insensitive: the signature verifies an upper-case
	// headHash, so the log extends it (found in review, 2026-12-04: it was
	// reported "rewritten").
	upper := map[string]any{}
	_ = json.Unmarshal(cpJSON, &upper)
	upper["headHash"] = strings.ToUpper(upper["headHash"].(string))
	upperJSON, _ := json.Marshal(upper)
	check("upper-case headHash", good, []string{"-checkpoint", write("upper.json", upperJSON), "-key", pub}, 0, "checkpoint at position 5 signed")
	forged := bytes.Replace(cpJSON, []byte(`"position":5`), []byte(`"position":4`), 1)
	check("edited checkpoint", good, []string{"-checkpoint", write("forged.json", forged), "-key", pub}, 1, "signature does not verify")

	// Events after the checkpoint: the log still extends it.
	var task struct{ CreateTask struct{ ID string } }
	post(`mutation($p: ID!) { createTask(input: {projectId: $p, title: "later"}) { id } }`, map[string]any{"p": p.CreateProject.ID}, &task)
	check("later, unsealed", export(), []string{"-checkpoint", cpPath, "-key", pub}, 0, "1 not sealed yet")
	env.Seal(t)
	check("later, sealed", export(), []string{"-checkpoint", cpPath, "-key", pub}, 0, "6 sealed (positions 1 to 6)")

	if code, err := run([]string{"-checkpoint", cpPath}, io.Discard); code != 2 || err == nil {
		t.Errorf("no export: %d %v", code, err)
	}
	// A file kept when there was no checkpoint, or an error, is said to be so
	// (it used to fail on "checkpoint chain key is empty").
	for name, kept := range map[string]struct{ json, says string }{
		"null":        {`null`, "holds no checkpoint"},
		"null answer": {`{"data":{"auditCheckpoint":null}}`, "holds no checkpoint (auditCheckpoint is null"},
		"error":       {`{"errors":[{"message":"workspace not found"}],"data":null}`, "an error, not a checkpoint: workspace not found"},
	} {
		code, err := run([]string{"-export", write(name+".ndjson", good), "-checkpoint", write(name+".json", []byte(kept.json)), "-key", pub}, io.Discard)
		if code != 2 || err == nil || !strings.Contains(err.Error(), kept.says) {
			t.Errorf("checkpoint file %s: exit %d (%v), want 2 saying %q", name, code, err, kept.says)
		}
	}
}

// An untouched traced event verifies offline: the hash covers traceId when it
// is set (audit.Record), and record() rebuilt it without it until 2026-12-04,
// so every event of a traced request was reported as edited.
func TestTracedEventVerifiesOffline(t *testing.T) {
	ws, actor := "0190c0de-0000-7000-8000-00000000000a", "0190c0de-0000-7000-8000-00000000000b"
	trace := "4bf92f3577b34da6a3ce929d0e0e4736"
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)
	rec := audit.Record{ID: "0190c0de-0000-7000-8000-00000000000c", ChainKey: ws, WorkspaceID: &ws, ActorID: &actor,
		Action: "task.created", EntityType: "task", EntityID: "t1", OccurredAt: at,
		Metadata: map[string]any{"title": "x"}, TraceID: &trace}
	sum, err := audit.Hash(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	pos, hash := int64(1), hex.EncodeToString(sum)
	e := store.AuditEvent{ID: rec.ID, WorkspaceID: &ws, ActorID: &actor, Action: rec.Action, EntityType: "task",
		EntityID: "t1", OccurredAt: at, Metadata: store.RawJSON(`{"title":"x"}`), Sealed: true,
		ChainPosition: &pos, Hash: &hash, TraceID: &trace}
	if findings, _ := verify([]exportedEvent{e}, nil, nil); len(findings) > 0 {
		t.Fatalf("an untouched traced event: %v", findings)
	}
}

// Found in review (2026-12-04): an export whose oldest events were cut off
// (by whoever handled the file) verified "OK" with nothing said: the first
// sealed event's prevHash was taken as given. Retention drops the oldest
// months too, so it is not a failure, but the auditor is told.
func TestExportNotFromTheFirstPositionIsNoted(t *testing.T) {
	ws := "0190c0de-0000-7000-8000-00000000000a"
	var events []exportedEvent
	var prev []byte
	for i := range 4 {
		rec := audit.Record{ID: fmt.Sprintf("0190c0de-0000-7000-8000-00000000010%d", i), ChainKey: ws, WorkspaceID: &ws,
			Action: "task.created", EntityType: "task", EntityID: fmt.Sprint(i),
			OccurredAt: time.Date(2026, 12, 1, 10, 0, i, 0, time.UTC), Metadata: map[string]any{}}
		sum, err := audit.Hash(prev, rec)
		if err != nil {
			t.Fatal(err)
		}
		pos, hash := int64(i+1), hex.EncodeToString(sum)
		e := exportedEvent{ID: rec.ID, WorkspaceID: &ws, Action: rec.Action, EntityType: "task", EntityID: rec.EntityID,
			OccurredAt: rec.OccurredAt, Metadata: store.RawJSON(`{}`), Sealed: true, ChainPosition: &pos, Hash: &hash}
		if prev != nil {
			p := hex.EncodeToString(prev)
			e.PrevHash = &p
		}
		events, prev = append(events, e), sum
	}
	findings, summary := verify(events[2:], nil, nil)
	if len(findings) > 0 || !strings.Contains(summary, "positions 1 to 2 are not in the export") {
		t.Fatalf("an export cut before position 3: findings %v, summary %q", findings, summary)
	}
	if _, summary := verify(events, nil, nil); strings.Contains(summary, "not in the export") {
		t.Fatalf("a whole export: %q", summary)
	}
}

// Found in review (2026-12-04): -checkpoint and -key files were read whole
// into memory, whatever their size (-checkpoint /dev/zero grew until the
// process was killed); a checkpoint or key is a few hundred bytes.
func TestHugeCheckpointOrKeyFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, append(bytes.Repeat([]byte(" "), 2<<20), `{}`...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCheckpoint(huge); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a checkpoint file of 2 MiB: %v", err)
	}
	if _, err := readKey("@" + huge); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a key file of 2 MiB: %v", err)
	}
}
