// Command auditverify is an auditor's offline check of a TaskFlow workspace's
// audit log: it reads an NDJSON export (GET /audit/export?format=ndjson, no
// filters), recomputes the hash chain from the events (the canonical encoding
// of package taskflow/audit), and checks a signed checkpoint the auditor kept
// (the JSON of auditCheckpoint) with the server's Ed25519 public key (from
// auditSigningKeys, obtained out of band): its signature, and that the export
// extends it (the event at its position has its hash, and every event up to
// the newest follows from it). It needs no access to the server or the
// database. It reads the export a line at a time and keeps a few hundred
// bytes for each gap still open in the positions read so far, never the
// events: its memory does not grow with the export (verifyExport).
//
// Usage:
//
//	go run ./examples/auditverify -export audit.ndjson -checkpoint checkpoint.json -key <base64 public key>
//
// -key also takes @file (the key in a file, base64 or PEM). Without
// -checkpoint only the chain is checked. It writes each finding on a line as
// it finds it, then a summary line; it exits 0 when everything holds, 1 when
// something does not, 2 on bad usage or an export it cannot read (a line
// that is not JSON or is over 16 MiB, more than 16,384 gaps open at once).
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
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

// run checks the files named by args and writes its findings to out, each as
// it is found; it returns the exit code.
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
	var cp *audit.Checkpoint
	var pub ed25519.PublicKey
	var err error
	if *cpPath != "" {
		if cp, err = readCheckpoint(*cpPath); err != nil {
			return 2, err
		}
		if pub, err = readKey(*keyArg); err != nil {
			return 2, err
		}
	}
	f, err := os.Open(*exportPath)
	if err != nil {
		return 2, err
	}
	defer f.Close()
	failed := 0
	summary, err := verifyExport(f, *exportPath, cp, pub, func(finding string) {
		failed++
		fmt.Fprintln(out, "FAIL", finding)
	})
	if err != nil {
		return 2, err
	}
	fmt.Fprintln(out, summary)
	if failed > 0 {
		return 1, nil
	}
	fmt.Fprintln(out, "OK")
	return 0, nil
}

// maxLine is the longest line of an export that verifyExport reads. The
// server sets no limit on an event's size as such (nor on its metadata):
// each field it records is limited on its own, and the longest line its
// write paths make today is a task.updated that changes a title and a
// description of characters the export escapes to 6 bytes (<, control
// characters): 123,046 bytes (measured 2026-12-05). A limit that close
// would refuse a real export whenever a field's limit grows or an event of
// another kind is larger; 16 MiB costs what one line costs, whatever the
// number of lines: verifyExport holds one line and its decoded event at a
// time (20 lines of 16 MiB: the live heap 32 MiB above the start between
// lines, the heap 168 MiB at most while one is decoded and hashed).
const maxLine = 16 << 20

// maxOpenGaps is how many gaps verifyExport lets the positions read so far
// have at once. An export comes newest first by (occurredAt, id), which is
// not chain order (a position is the order of its transaction's id, taken
// at its first write), so an event can come after events above it and leave
// a gap until it comes: an export of 643 events written by 16 concurrent
// clients had 213 lines out of position order and 3 gaps open at most
// (2026-12-05). A gap of a filtered or doctored export stays open to the
// end. Each gap costs a span, about 200 bytes (3.3 MB measured for 16,384).
const maxOpenGaps = 1 << 14

// maxKeptID is how much of an event's id a span keeps for a finding (an id is
// 36 characters; one of a doctored export can be as long as a line).
const maxKeptID = 64

// maxWorkspaces is how many workspaces the verifier counts: an export holds
// one, and beyond this many the finding says "more than".
const maxWorkspaces = 1024

// verifyExport reads an NDJSON export from r (name says where, in errors) a
// line at a time, checks each event as it is read and calls fail with each
// finding when it is found: per event (its hash, its link to the positions
// next to it), then, at the end, the gaps in the positions, the workspaces
// and the checkpoint cp (nil: none) with pub. It returns the summary line.
// Its memory does not grow with the export: one line (at most maxLine
// bytes) and, per gap still open in the positions read so far, a few
// hundred bytes. It returns an error for a line that is not JSON or is
// longer than maxLine, or when more than maxOpenGaps gaps are open at once
// (the findings before it were given).
func verifyExport(r io.Reader, name string, cp *audit.Checkpoint, pub ed25519.PublicKey, fail func(string)) (string, error) {
	v := &verifier{cp: cp, pub: pub, fail: fail, workspaces: map[[sha256.Size]byte]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 1
	for ; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := checkMembers(line, eventFields); err != nil {
			return "", fmt.Errorf("%s line %d: %w", name, n, err)
		}
		var e exportedEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return "", fmt.Errorf("%s line %d: %w", name, n, err)
		}
		if err := v.add(&e); err != nil {
			return "", fmt.Errorf("%s line %d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return "", fmt.Errorf("%s line %d: longer than %d bytes: not an event of an export", name, n, maxLine)
		}
		return "", fmt.Errorf("%s line %d: %w", name, n, err)
	}
	return v.end(), nil
}

// hashRef is a hash of an event (prevHash or hash) as a span keeps it to
// compare it later: whether it is set, and the SHA-256 of its text (equal
// texts, equal sums; the text can be as long as a line).
type hashRef struct {
	set bool
	sum [sha256.Size]byte
}

func refOf(s *string) hashRef {
	if s == nil {
		return hashRef{}
	}
	return hashRef{set: true, sum: sha256.Sum256([]byte(*s))}
}

// span is a stretch of consecutive positions read: the id and prevHash of the
// event at lo (the event at lo-1 must have that hash) and the hash of the
// event at hi (the event at hi+1 must have it as prevHash).
type span struct {
	lo, hi int64
	loID   string
	loPrev hashRef
	hiHash hashRef
}

// verifier checks the events of an export one at a time (verifyExport).
type verifier struct {
	cp   *audit.Checkpoint
	pub  ed25519.PublicKey
	fail func(string)

	events, sealed int
	// spans are the positions read so far, disjoint and apart (a gap between
	// each two), in order of position.
	spans []*span
	// workspaces holds the SHA-256 of each workspace id seen, at most
	// maxWorkspaces; more says there were more.
	workspaces map[[sha256.Size]byte]bool
	more       bool
	cpChain    bool    // an event of cp's chain was seen
	cpHash     *string // the hash of the event at cp's position
}

func (v *verifier) failf(format string, a ...any) { v.fail(fmt.Sprintf(format, a...)) }

// add checks e: its hash, and its link to the events next to it in the
// chain when they were read. It returns an error when e would open more
// than maxOpenGaps gaps.
func (v *verifier) add(e *exportedEvent) error {
	v.events++
	if e.WorkspaceID != nil {
		if k := sha256.Sum256([]byte(*e.WorkspaceID)); !v.workspaces[k] {
			if len(v.workspaces) < maxWorkspaces {
				v.workspaces[k] = true
			} else {
				v.more = true
			}
		}
		v.cpChain = v.cpChain || v.cp != nil && *e.WorkspaceID == v.cp.ChainKey
	}
	if !e.Sealed {
		return nil
	}
	if e.ChainPosition == nil || e.Hash == nil {
		v.failf("event %s says it is sealed but has no position or hash", e.ID)
		return nil
	}
	v.sealed++
	pos := *e.ChainPosition
	if v.cp != nil && pos == v.cp.Position && v.cpHash == nil {
		h := *e.Hash
		v.cpHash = &h
	}
	if err := v.link(e); err != nil {
		return err
	}
	r, err := record(*e)
	if err != nil {
		v.failf("event %s: %v", e.ID, err)
		return nil
	}
	var prevBytes []byte
	if e.PrevHash != nil {
		if prevBytes, err = hex.DecodeString(*e.PrevHash); err != nil {
			v.failf("event %s: prevHash is not hex", e.ID)
			return nil
		}
	}
	sum, err := audit.Hash(prevBytes, r)
	if err != nil || hex.EncodeToString(sum) != *e.Hash {
		v.failf("event %s at position %d: its hash is not the hash of its content (edited event or forged hash)", e.ID, pos)
	}
	return nil
}

// link puts the sealed event e in v.spans, checking its prevHash against the
// hash of the event before it and its hash against the prevHash of the
// event after it, when they were read.
func (v *verifier) link(e *exportedEvent) error {
	pos := *e.ChainPosition
	// The first span that reaches pos: the one after pos, or pos's own.
	i, _ := slices.BinarySearchFunc(v.spans, pos, func(s *span, pos int64) int { return cmp.Compare(s.hi, pos) })
	if i < len(v.spans) && v.spans[i].lo <= pos {
		// Read before: as when the positions were sorted, a position
		// after itself.
		v.failf("positions jump from %d to %d: events are missing (or the export was filtered)", pos, pos)
		return nil
	}
	var below, above *span
	if i > 0 && v.spans[i-1].hi == pos-1 {
		below = v.spans[i-1]
		if below.hiHash != refOf(e.PrevHash) {
			v.failf("event %s at position %d does not link to the event before it", e.ID, pos)
		}
	}
	if i < len(v.spans) && v.spans[i].lo == pos+1 {
		above = v.spans[i]
		if above.loPrev != refOf(e.Hash) {
			v.failf("event %s at position %d does not link to the event before it", above.loID, above.lo)
		}
	}
	switch {
	case below != nil && above != nil:
		below.hi, below.hiHash = above.hi, above.hiHash
		v.spans = slices.Delete(v.spans, i, i+1)
	case below != nil:
		below.hi, below.hiHash = pos, refOf(e.Hash)
	case above != nil:
		above.lo, above.loID, above.loPrev = pos, keptID(e.ID), refOf(e.PrevHash)
	default:
		if len(v.spans) > maxOpenGaps {
			return fmt.Errorf("more than %d gaps in the positions read so far (at position %d): "+
				"too many events are missing, or the export is not in the server's order", maxOpenGaps, pos)
		}
		v.spans = slices.Insert(v.spans, i, &span{lo: pos, hi: pos, loID: keptID(e.ID), loPrev: refOf(e.PrevHash), hiHash: refOf(e.Hash)})
	}
	return nil
}

// keptID is id as a span keeps it: at most maxKeptID bytes.
func keptID(id string) string {
	if len(id) > maxKeptID {
		return strings.ToValidUTF8(id[:maxKeptID], "") + "…"
	}
	return id
}

// end reports what only the whole export shows: the gaps left, a first event
// that links before it, more than one workspace and the checkpoint. It
// returns the summary line.
func (v *verifier) end() string {
	for i := 1; i < len(v.spans); i++ {
		v.failf("positions jump from %d to %d: events are missing (or the export was filtered)", v.spans[i-1].hi, v.spans[i].lo)
	}
	first, last := int64(0), int64(0)
	if len(v.spans) > 0 {
		first, last = v.spans[0].lo, v.spans[len(v.spans)-1].hi
		if first == 1 && v.spans[0].loPrev.set {
			v.failf("event %s is the first of its chain but links to a hash before it", v.spans[0].loID)
		}
	}
	switch {
	case v.more:
		v.failf("the export holds events of more than %d workspaces: export one workspace", maxWorkspaces)
	case len(v.workspaces) > 1:
		v.failf("the export holds events of %d workspaces: export one workspace", len(v.workspaces))
	}
	summary := fmt.Sprintf("%d events: %d sealed (positions %d to %d), %d not sealed yet", v.events, v.sealed, first, last, v.events-v.sealed)
	if first > 1 {
		// The first event's prevHash is taken as given: what came before it
		// cannot be checked from the export.
		summary += fmt.Sprintf("; positions 1 to %d are not in the export (dropped by the server's AUDIT_RETENTION, or removed: ask the operator)", first-1)
	}
	cp := v.cp
	if cp == nil {
		return summary
	}
	if err := cp.Verify(v.pub); err != nil {
		v.failf("checkpoint: %v", err)
	}
	if !v.cpChain && len(v.workspaces) > 0 {
		v.failf("checkpoint is of chain %s, not of the exported workspace", cp.ChainKey)
	}
	switch {
	case v.cpHash == nil && cp.Position > last:
		v.failf("checkpoint at position %d, but the log ends at %d: events it covers are gone", cp.Position, last)
	case v.cpHash == nil:
		v.failf("checkpoint at position %d, which the export does not hold (it starts at %d)", cp.Position, first)
	case !strings.EqualFold(*v.cpHash, cp.HeadHash): // hex: either case is the same hash
		v.failf("checkpoint at position %d has hash %s, the log %s: the log was rewritten", cp.Position, cp.HeadHash, *v.cpHash)
	}
	return summary + fmt.Sprintf("; checkpoint at position %d signed %s by key %s",
		cp.Position, cp.SignedAt.UTC().Format(time.RFC3339), cp.KeyID)
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
	if err := checkMembers(b, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
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

// eventFields are the members of an exported event, as the server writes
// them (store.AuditEvent's JSON names).
var eventFields = func() map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeFor[exportedEvent]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = true
		}
	}
	return fields
}()

// maxMemberDepth is how deep checkMembers follows objects and arrays; the
// server's events nest a few levels (metadata's changes).
const maxMemberDepth = 64

// checkMembers refuses a JSON text that reads one way to the verifier and
// another to the next reader: a member written twice in one object (at any
// depth; encoding/json and jsonb keep the last, other readers the first),
// and, when top is not nil, a member of the top object that is not in top by
// its exact name (encoding/json matches names in any case, and drops members
// it does not know, which the hash does not cover). It also refuses nesting
// deeper than maxMemberDepth. It leaves other faults to the decoder.
func checkMembers(b []byte, top map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func(depth int) error
	walk = func(depth int) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		delim, ok := tok.(json.Delim)
		if !ok || delim == '}' || delim == ']' {
			return nil
		}
		if depth >= maxMemberDepth {
			return fmt.Errorf("nested deeper than %d levels", maxMemberDepth)
		}
		seen := map[string]bool{}
		for dec.More() {
			if delim == '{' {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				if seen[key] {
					return fmt.Errorf("member %q is written twice in one object: refused, a reader could take either", key)
				}
				seen[key] = true
				if depth == 0 && top != nil && !top[key] {
					return fmt.Errorf("member %q is not a field of an exported event (names are exact): refused, the hash does not cover it", key)
				}
			}
			if err := walk(depth + 1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // the closing '}' or ']'
		return err
	}
	return walk(0)
}
