// Command auditverify is an auditor's offline check of a TaskFlow workspace's
// audit log: it reads an NDJSON export (GET /audit/export?format=ndjson, no
// filters), recomputes the hash chain from the events (the canonical encoding
// of package taskflow/audit), and checks a signed checkpoint the auditor kept
// (the JSON of auditCheckpoint) with the server's Ed25519 public key (from
// auditSigningKeys, obtained out of band): its signature, and that the export
// extends it (the event at its position has its hash, and every event up to
// the newest follows from it). It needs no access to the server or the
// database.
//
// Usage:
//
//	go run ./examples/auditverify -export audit.ndjson -checkpoint checkpoint.json -key <base64 public key>
//
// -key also takes @file (the key in a file, base64 or PEM). Without
// -checkpoint only the chain is checked. It exits 0 when everything holds, 1
// when something does not (each finding on a line), 2 on bad usage.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"taskflow/audit"
	"taskflow/store"
)

func main() {
	code, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "auditverify: %v\n", err)
	}
	os.Exit(code)
}

// exportedEvent is one line of an NDJSON export: the event as the API gives
// it.
type exportedEvent = store.AuditEvent

// record returns the record e's hash covers; its chain is its workspace.
func record(e exportedEvent) (audit.Record, error) {
	meta, err := audit.DecodeMetadata(e.Metadata)
	if err != nil {
		return audit.Record{}, err
	}
	chain := ""
	if e.WorkspaceID != nil {
		chain = *e.WorkspaceID
	}
	return audit.Record{ID: e.ID, ChainKey: chain, WorkspaceID: e.WorkspaceID, ActorID: e.ActorID, Action: e.Action,
		EntityType: e.EntityType, EntityID: e.EntityID, OccurredAt: e.OccurredAt, IP: e.IP, UserAgent: e.UserAgent,
		RequestID: e.RequestID, Metadata: meta, TraceID: e.TraceID}, nil
}

// run checks the files named by args and writes its findings to out; it
// returns the exit code.
func run(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("auditverify", flag.ContinueOnError)
	fs.SetOutput(out)
	exportPath := fs.String("export", "", "NDJSON export of the workspace's audit log (no filters)")
	cpPath := fs.String("checkpoint", "", "checkpoint JSON kept from auditCheckpoint (optional)")
	keyArg := fs.String("key", "", "the server's Ed25519 public key: base64, or @file (base64 or PEM)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *exportPath == "" || *cpPath != "" && *keyArg == "" {
		return 2, errors.New("usage: auditverify -export audit.ndjson [-checkpoint checkpoint.json -key <public key>]")
	}
	events, err := readExport(*exportPath)
	if err != nil {
		return 2, err
	}
	var cp *audit.Checkpoint
	var pub ed25519.PublicKey
	if *cpPath != "" {
		if cp, err = readCheckpoint(*cpPath); err != nil {
			return 2, err
		}
		if pub, err = readKey(*keyArg); err != nil {
			return 2, err
		}
	}
	findings, summary := verify(events, cp, pub)
	for _, f := range findings {
		fmt.Fprintln(out, "FAIL", f)
	}
	fmt.Fprintln(out, summary)
	if len(findings) > 0 {
		return 1, nil
	}
	fmt.Fprintln(out, "OK")
	return 0, nil
}

// verify recomputes the chain of the sealed events in order of position and
// checks the checkpoint cp (nil: none) with pub. It returns what failed and a
// summary line.
func verify(events []exportedEvent, cp *audit.Checkpoint, pub ed25519.PublicKey) (findings []string, summary string) {
	fail := func(format string, a ...any) { findings = append(findings, fmt.Sprintf(format, a...)) }
	var sealed []exportedEvent
	chains := map[string]bool{}
	for _, e := range events {
		if e.WorkspaceID != nil {
			chains[*e.WorkspaceID] = true
		}
		if e.Sealed {
			if e.ChainPosition == nil || e.Hash == nil {
				fail("event %s says it is sealed but has no position or hash", e.ID)
				continue
			}
			sealed = append(sealed, e)
		}
	}
	if len(chains) > 1 {
		fail("the export holds events of %d workspaces: export one workspace", len(chains))
	}
	slices.SortFunc(sealed, func(a, b exportedEvent) int { return cmp.Compare(*a.ChainPosition, *b.ChainPosition) })
	byPosition := map[int64]exportedEvent{}
	var prev *string
	for i, e := range sealed {
		pos := *e.ChainPosition
		byPosition[pos] = e
		switch {
		case i > 0 && pos != *sealed[i-1].ChainPosition+1:
			fail("positions jump from %d to %d: events are missing (or the export was filtered)", *sealed[i-1].ChainPosition, pos)
		case i > 0 && !sameHash(e.PrevHash, prev):
			fail("event %s at position %d does not link to the event before it", e.ID, pos)
		case i == 0 && pos == 1 && e.PrevHash != nil:
			fail("event %s is the first of its chain but links to a hash before it", e.ID)
		}
		prev = e.Hash
		r, err := record(e)
		if err != nil {
			fail("event %s: %v", e.ID, err)
			continue
		}
		var prevBytes []byte
		if e.PrevHash != nil {
			if prevBytes, err = hex.DecodeString(*e.PrevHash); err != nil {
				fail("event %s: prevHash is not hex", e.ID)
				continue
			}
		}
		sum, err := audit.Hash(prevBytes, r)
		if err != nil || hex.EncodeToString(sum) != *e.Hash {
			fail("event %s at position %d: its hash is not the hash of its content (edited event or forged hash)", e.ID, pos)
		}
	}
	first, last := int64(0), int64(0)
	if len(sealed) > 0 {
		first, last = *sealed[0].ChainPosition, *sealed[len(sealed)-1].ChainPosition
	}
	summary = fmt.Sprintf("%d events: %d sealed (positions %d to %d), %d not sealed yet", len(events), len(sealed), first, last, len(events)-len(sealed))
	if first > 1 {
		// The first event's prevHash is taken as given: what came before it
		// cannot be checked from the export.
		summary += fmt.Sprintf("; positions 1 to %d are not in the export (dropped by the server's AUDIT_RETENTION, or removed: ask the operator)", first-1)
	}
	if cp == nil {
		return findings, summary
	}
	if err := cp.Verify(pub); err != nil {
		fail("checkpoint: %v", err)
	}
	if !chains[cp.ChainKey] && len(chains) > 0 {
		fail("checkpoint is of chain %s, not of the exported workspace", cp.ChainKey)
	}
	e, ok := byPosition[cp.Position]
	switch {
	case !ok && cp.Position > last:
		fail("checkpoint at position %d, but the log ends at %d: events it covers are gone", cp.Position, last)
	case !ok:
		fail("checkpoint at position %d, which the export does not hold (it starts at %d)", cp.Position, first)
	case !strings.EqualFold(*e.Hash, cp.HeadHash): // hex: either case is the same hash
		fail("checkpoint at position %d has hash %s, the log %s: the log was rewritten", cp.Position, cp.HeadHash, *e.Hash)
	}
	return findings, summary + fmt.Sprintf("; checkpoint at position %d signed %s by key %s",
		cp.Position, cp.SignedAt.UTC().Format(time.RFC3339), cp.KeyID)
}

func sameHash(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// readExport reads an NDJSON export.
func readExport(path string) ([]exportedEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []exportedEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e exportedEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// maxSmallFile is the most a checkpoint or key file may hold: either is a
// few hundred bytes (a GraphQL answer around a checkpoint, a PEM block).
const maxSmallFile = 1 << 20

// readSmallFile reads the file at path, or fails if it holds more than
// maxSmallFile bytes (never reading more).
func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSmallFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSmallFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a checkpoint or a key", path, maxSmallFile)
	}
	return b, nil
}

// readCheckpoint reads a checkpoint's JSON (extra fields, such as publicKey
// and message, are ignored: the message is rebuilt from the fields).
func readCheckpoint(path string) (*audit.Checkpoint, error) {
	b, err := readSmallFile(path)
	if err != nil {
		return nil, err
	}
	// Accept the object itself or a GraphQL answer around it.
	var wrapped struct {
		Data *struct {
			AuditCheckpoint *audit.Checkpoint `json:"auditCheckpoint"`
		} `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(b, &wrapped) == nil && (wrapped.Data != nil || len(wrapped.Errors) > 0) {
		if wrapped.Data != nil && wrapped.Data.AuditCheckpoint != nil {
			return wrapped.Data.AuditCheckpoint, nil
		}
		if len(wrapped.Errors) > 0 {
			return nil, fmt.Errorf("%s: the answer kept is an error, not a checkpoint: %s", path, wrapped.Errors[0].Message)
		}
		return nil, fmt.Errorf("%s: the answer kept holds no checkpoint (auditCheckpoint is null: the workspace had none yet when it was asked)", path)
	}
	var cp *audit.Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cp == nil || *cp == (audit.Checkpoint{}) {
		return nil, fmt.Errorf("%s holds no checkpoint (null or empty: the workspace had none yet when it was asked)", path)
	}
	return cp, nil
}

// readKey reads a public key given inline or as @file.
func readKey(arg string) (ed25519.PublicKey, error) {
	if path, ok := strings.CutPrefix(arg, "@"); ok {
		b, err := readSmallFile(path)
		if err != nil {
			return nil, err
		}
		arg = string(b)
	}
	return audit.ParsePublicKey(arg)
}
