package store_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// Found in review (2026-12-05): "a tampered head is signed one round later,
// once the next seal vouches for it; verify still reports the broken link."
// A superuser who rewrites the newest sealed event under a checkpoint the
// server signed, its seal and the head recomputed (the sealer does it for
// them), leaves a head that its seal vouches for; the sealer chained the next
// events onto it and signed a checkpoint of a log that no longer extends the
// one it had signed before: two genuine checkpoints of one chain that
// contradict each other. The sealer now signs only what extends the last
// checkpoint it signed of the chain, whether it remembers that checkpoint
// (the same sealer) or reads it back (a restarted one), even when the
// superuser removed the stored row too.
func TestSealerSignsOnlyWhatExtendsItsLastCheckpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// restarted signs after the tampering with another AuditSealer
		// value: one that did not sign the checkpoint kept.
		restarted bool
		// dropStored removes the stored checkpoint too.
		dropStored bool
		// forgetVerified makes the sealer forget how far it verified the
		// chain, as it forgets one chain's for each new one past
		// maxRemembered, apart from the checkpoints it signed: what it
		// remembers signing must still hold it (found 2026-12-05 when the
		// memory of checkpoints signed was taken for redundant with the
		// verified positions; without it this case signs position 7).
		forgetVerified bool
	}{
		{"same sealer", false, false, false},
		{"restarted sealer", true, false, false},
		{"same sealer, stored checkpoint removed", false, true, false},
		{"same sealer, stored checkpoint removed, verified position forgotten", false, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setupExtend(t)
			tamper := []tamperStmt{{`UPDATE audit_events SET metadata = '{"title": "rewritten"}' WHERE id = $1`, []any{s.ids[4]}}}
			tamper = append(tamper, s.resealFrom(4)...)
			if c.dropStored {
				tamper = append(tamper, tamperStmt{`DELETE FROM audit_checkpoints WHERE chain_key = $1 AND position = 5`, []any{s.ws}})
			}
			tamperer{s.f.superuser()}.run(t, tamper...)
			storetest.SealAll(t, &store.AuditSealer{DB: s.f.db}) // event 5 sealed again, over the same seal 4
			sealer := s.sealer
			if c.restarted {
				sealer = s.newSealer()
			}
			if c.forgetVerified {
				store.ForgetVerified(sealer, s.ws)
			}
			s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "6", nil), nil)
			s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "7", nil), nil)
			_, other := s.f.ownedWorkspace(2)
			storetest.SealAll(t, sealer)
			if _, err := sealer.Round(ctx); err != nil { // a sweep too
				t.Fatal(err)
			}

			s.checkNothingSignedPast(t, 5)
			if cp, err := sealer.Checkpoint(ctx, s.ws); err == nil || cp != nil {
				t.Errorf("Checkpoint of a chain that does not extend its last checkpoint: %+v, %v; want an error", cp, err)
			} else if !strings.Contains(err.Error(), "does not extend") {
				t.Errorf("Checkpoint's error: %v", err)
			}
			// Other chains are sealed and signed as before.
			if cp, err := s.f.db.LatestAuditCheckpoint(ctx, other, s.keys[:1]); err != nil || cp == nil || cp.Position != 2 {
				t.Errorf("another chain's checkpoint: %+v, %v; want position 2", cp, err)
			}
			if n := sealer.WithheldCheckpoints(); n != 1 {
				t.Errorf("WithheldCheckpoints = %d, want 1: the rounds' and Checkpoint's finding, counted once", n)
			}
			s.checkLogged(t, "7")
			// verifyAuditLog still reports the rewrite, against the kept
			// checkpoint (and the stored one, unless removed).
			v, err := s.f.db.VerifyAuditLog(ctx, s.owner, s.ws, &s.kept.Checkpoint, s.keys, nil)
			if err != nil {
				t.Fatal(err)
			}
			if v.Valid || v.Checkpoint.Extended || v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != s.ids[4] {
				t.Errorf("verify against the kept checkpoint: valid %v, extended %v, first invalid %s; want invalid at %s",
					v.Valid, v.Checkpoint.Extended, str(v.FirstInvalidEventID), s.ids[4])
			}
		})
	}
}

// Found in review (2026-12-05): each round read back the newest stored
// checkpoint of the sealer's key of each chain it was about to sign, and
// checked its signature, even when the sealer remembered signing it or
// verifying the seals past it: a read and an Ed25519 verification a chain a
// round, for nothing. The statement that checks the chains (extendSQL) now
// reads none at or below the positions the sealer remembers, and still
// reads a newer one.
func TestSealerDoesNotReadBackWhatItVerified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupExtend(t) // a checkpoint at 5
	hashes := map[int64][]byte{}
	rows, err := s.f.db.Pool.Query(ctx, `SELECT position, hash FROM audit_seals WHERE chain_key = $1`, s.ws)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p int64
		var h []byte
		if err := rows.Scan(&p, &h); err != nil {
			t.Fatal(err)
		}
		hashes[p] = h
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// signed and verified are the positions the sealer remembers (0:
		// none).
		signed, verified int64
		// read is the position of the stored checkpoint read (0: none).
		read int64
	}{
		{"signed and verified by the sealer", 5, 5, 0},
		{"verified by the sealer", 0, 5, 0},
		{"signed by the sealer", 5, 0, 0},
		{"nothing remembered (a restarted sealer)", 0, 0, 5},
		{"older ones remembered", 3, 4, 5},
	} {
		at := func(p int64) (pgtype.Int8, []byte) { return pgtype.Int8{Int64: p, Valid: p > 0}, hashes[p] }
		mp, mh := at(c.signed)
		vp, vh := at(c.verified)
		var read pgtype.Int8
		var broken pgtype.Int8
		if err := s.f.db.Pool.QueryRow(ctx, `SELECT x.position, x.broken FROM (`+store.ExtendSQL+`) x(i, position, head_hash, signed_at, signature, a, b, seals, broken)`,
			[]string{s.ws}, []pgtype.Int8{mp}, [][]byte{mh}, []int64{5}, [][]byte{hashes[5]}, []int64{math.MaxInt64},
			audit.KeyID(s.keys[0]), []pgtype.Int8{vp}, [][]byte{vh}, nil).Scan(&read, &broken); err != nil {
			t.Fatal(err)
		}
		if read.Int64 != c.read || broken.Valid {
			t.Errorf("%s: stored checkpoint read at %d (broken at %v); want %d, none broken", c.name, read.Int64, broken, c.read)
		}
	}
}

// An intact chain is signed as before, by the sealer that signed its last
// checkpoint and by another (a restarted instance reads the checkpoint
// back), across checkpoints, sweeps and Checkpoint; so is a chain whose
// newest events another instance sealed.
func TestSealerSignsAnIntactChainAfterItsLastCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupExtend(t)
	for i, sealer := range []*store.AuditSealer{s.sealer, s.newSealer(), s.sealer} {
		s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "more", nil), nil)
		// Another instance seals the event: no checkpoint.
		storetest.SealAll(t, &store.AuditSealer{DB: s.f.db})
		s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "more", nil), nil)
		storetest.SealAll(t, sealer)
		want := int64(7 + 2*i)
		if cp, err := s.f.db.LatestAuditCheckpoint(ctx, s.ws, s.keys[:1]); err != nil || cp == nil || cp.Position != want {
			t.Fatalf("round %d: checkpoint %+v, %v; want position %d", i, cp, err, want)
		}
		if cp, err := sealer.Checkpoint(ctx, s.ws); err != nil || cp == nil || cp.Position != want {
			t.Fatalf("round %d: Checkpoint %+v, %v; want position %d", i, cp, err, want)
		}
		if n := sealer.WithheldCheckpoints(); n != 0 {
			t.Fatalf("round %d: %d checkpoints withheld of an intact chain", i, n)
		}
		// Checkpoint found the round's checkpoint of the same head at its
		// key: a genuine one, not a row in the way.
		if n := sealer.BlockedCheckpoints(); n != 0 {
			t.Fatalf("round %d: %d checkpoints blocked of an intact chain", i, n)
		}
	}
	if v, err := s.f.db.VerifyAuditLog(ctx, s.owner, s.ws, &s.kept.Checkpoint, s.keys, nil); err != nil || !v.Valid || !v.Checkpoint.Valid {
		t.Fatalf("verify: %+v, %v", v, err)
	}
}

// A link broken between the last checkpoint and the head (a seal in between
// rewritten with a hash the next seal does not name), or a head moved before
// the last checkpoint with the seals after it removed, is not signed over
// either.
func TestSealerSignsNoBrokenLinkSinceItsLastCheckpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		tamper func(s *extendSetup) []tamperStmt
		// pos is the position the refusal names as the chain's head.
		pos string
	}{
		{"a seal between rewritten", func(s *extendSetup) []tamperStmt {
			return []tamperStmt{{`UPDATE audit_seals SET hash = sha256(hash) WHERE chain_key = $1 AND position = 6`, []any{s.ws}}}
		}, "10"},
		{"newest events removed with their seals, head moved back before the checkpoint", func(s *extendSetup) []tamperStmt {
			stmts := s.removeFrom(4)
			for _, id := range chainSeals(s.f.t, s.f.db, s.ws)[3:] {
				stmts = append(stmts, tamperStmt{`DELETE FROM audit_events WHERE id = $1`, []any{id}})
			}
			return stmts
		}, "6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setupExtend(t)
			// Two events past the checkpoint (5), sealed without one.
			s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "6", nil), nil)
			s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "7", nil), nil)
			storetest.SealAll(t, &store.AuditSealer{DB: s.f.db})
			tamperer{s.f.superuser()}.run(t, c.tamper(s)...)
			for _, e := range []string{"8", "9", "10"} {
				s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", e, nil), nil)
			}
			storetest.SealAll(t, s.sealer)
			s.checkNothingSignedPast(t, 5)
			if n := s.sealer.WithheldCheckpoints(); n == 0 {
				t.Error("nothing withheld")
			}
			s.checkLogged(t, c.pos)
			if v, err := s.f.db.VerifyAuditLog(ctx, s.owner, s.ws, nil, s.keys, nil); err != nil || v.Valid {
				t.Errorf("verify: %+v, %v; want invalid", v, err)
			}
		})
	}
}

// extendSetup is a workspace of five sealed events and a checkpoint of
// position 5 signed by sealer (kept, as a customer keeps it), with a log.
type extendSetup struct {
	f      *auditFixture
	owner  *store.User
	ws     string
	ids    []string
	key    ed25519.PrivateKey
	keys   []ed25519.PublicKey
	sealer *store.AuditSealer
	kept   *store.AuditCheckpoint
	log    *bytes.Buffer
}

func setupExtend(t *testing.T) *extendSetup {
	t.Helper()
	f, owner, ws, ids := sealedWorkspace(t)
	key := audit.GenerateSigningKey()
	s := &extendSetup{f: f, owner: owner, ws: ws, ids: ids, key: key,
		keys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, log: &bytes.Buffer{}}
	s.sealer = s.newSealer()
	kept, err := s.sealer.Checkpoint(context.Background(), ws)
	if err != nil || kept == nil || kept.Position != 5 {
		t.Fatalf("checkpoint: %+v, %v", kept, err)
	}
	s.kept = kept
	return s
}

// newSealer returns a sealer with the setup's key and log, due to sign at
// every round (another instance, or this one restarted).
func (s *extendSetup) newSealer() *store.AuditSealer {
	db := store.New(s.f.db.Pool, slog.New(slog.NewJSONHandler(s.log, nil)))
	return &store.AuditSealer{DB: db, Key: s.key, CheckpointEvery: time.Nanosecond}
}

// removeFrom returns the statements that remove the seals from position
// from on and move the head back to the seal before.
func (s *extendSetup) removeFrom(from int) []tamperStmt {
	var stmts []tamperStmt
	n := len(chainSeals(s.f.t, s.f.db, s.ws))
	for p := from; p <= n; p++ {
		stmts = append(stmts, tamperStmt{`DELETE FROM audit_seals WHERE chain_key = $1 AND position = $2`, []any{s.ws, p}})
	}
	return append(stmts, tamperStmt{`UPDATE audit_chain_heads h SET head_hash = s.hash, event_id = s.event_id, event_at = s.occurred_at,
		events = s.position FROM audit_seals s WHERE s.chain_key = h.chain_key AND s.position = $2 - 1 AND h.chain_key = $1`, []any{s.ws, from}})
}

// resealFrom returns removeFrom(from+1) and the statement that moves the
// sealer's cursor back to the event at position from: the next round seals
// the events after it again, over the same seal.
func (s *extendSetup) resealFrom(from int) []tamperStmt {
	return append(s.removeFrom(from+1), tamperStmt{`UPDATE audit_seal_cursor c SET tx_id = e.tx_id, seq = e.seq
		FROM audit_events e WHERE c.id = 1 AND e.id = $1`, []any{s.ids[from-1]}})
}

// checkNothingSignedPast fails the test if a checkpoint of the chain past
// position pos was stored, telling what verifyAuditLog makes of it and of
// the kept checkpoint.
func (s *extendSetup) checkNothingSignedPast(t *testing.T, pos int64) {
	t.Helper()
	ctx := context.Background()
	cp, err := s.f.db.LatestAuditCheckpoint(ctx, s.ws, s.keys[:1])
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil || cp.Position <= pos {
		return
	}
	newer, err := s.f.db.VerifyAuditLog(ctx, s.owner, s.ws, &cp.Checkpoint, s.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.f.db.VerifyAuditLog(ctx, s.owner, s.ws, &s.kept.Checkpoint, s.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Errorf("the sealer signed position %d (signature valid: %v, its seal has its hash: %v) after the checkpoint of position %d "+
		"that the log no longer extends (verifyAuditLog with it: extended %v, %s): the server vouched for a log that does not extend its own checkpoint",
		cp.Position, newer.Checkpoint.SignatureValid, newer.Checkpoint.Reason == nil || !strings.Contains(*newer.Checkpoint.Reason, "does not have"),
		s.kept.Position, kept.Checkpoint.Extended, str(kept.Checkpoint.Reason))
}

// checkLogged fails the test unless the log has an ERROR line about the
// chain, with its last checkpoint's position (5) and head's.
func (s *extendSetup) checkLogged(t *testing.T, head string) {
	t.Helper()
	s.checkErrorLine(t, "with checkpoint_position 5 and position "+head, func(l map[string]any) bool {
		return jsonNumber(l["checkpoint_position"]) == "5" && jsonNumber(l["position"]) == head
	})
}

// sealTwoMore appends two events to the chain, at positions 6 and 7 past
// setupExtend's checkpoint at 5, and seals them without a checkpoint.
func (s *extendSetup) sealTwoMore(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "6", nil), nil)
	s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "7", nil), nil)
	storetest.SealAll(t, &store.AuditSealer{DB: s.f.db})
}

// checkErrorLine fails the test unless the log has an ERROR line about the
// chain that match takes (the line decoded); what says which in the
// failure.
func (s *extendSetup) checkErrorLine(t *testing.T, what string, match func(l map[string]any) bool) {
	t.Helper()
	if s.errorLines(match) == 0 {
		t.Errorf("no ERROR line of chain %s %s:\n%s", s.ws, what, s.log)
	}
}

// errorLines returns how many ERROR lines about the chain the log has that
// match takes (the line decoded).
func (s *extendSetup) errorLines(match func(l map[string]any) bool) int {
	var n int
	for _, line := range strings.Split(strings.TrimSpace(s.log.String()), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["level"] == "ERROR" && l["chain"] == s.ws && match(l) {
			n++
		}
	}
	return n
}

// jsonNumber returns the text of a number decoded from JSON, or "".
func jsonNumber(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return ""
}
