package store_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"taskflow/audit"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Found in review (2026-12-05): before it signed a chain's head, the sealer
// checked the seals since the last checkpoint by their links only, not
// against their events: a seal whose hash is not its event's (the event
// edited under it, or the seal forged with the next seal's link made to
// match) was signed over, and the checkpoint vouched for a log that
// verifyAuditLog reports invalid. Now the seals since the last checkpoint
// (since the last one this sealer found to recompute) are recomputed from
// their events, with the hashing verifyAuditLog does, before a head is
// signed; a chain where one does not is withheld, logged and counted.
func TestSealerRecomputesTheSealsSinceItsLastCheckpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		tamper func(s *extendSetup) []tamperStmt
	}{
		{"an event edited under its seal", func(s *extendSetup) []tamperStmt {
			return []tamperStmt{{`UPDATE audit_events SET metadata = '{"title": "rewritten"}'
				WHERE id = (SELECT event_id FROM audit_seals WHERE chain_key = $1 AND position = 6)`, []any{s.ws}}}
		}},
		{"a seal forged, the next one linked to it", func(s *extendSetup) []tamperStmt {
			return []tamperStmt{
				{`UPDATE audit_seals SET hash = sha256(hash) WHERE chain_key = $1 AND position = 6`, []any{s.ws}},
				{`UPDATE audit_seals SET prev_hash = sha256(prev_hash) WHERE chain_key = $1 AND position = 7`, []any{s.ws}},
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setupExtend(t) // a checkpoint at 5
			s.sealTwoMore(t)    // two events past the checkpoint, sealed without one
			tamperer{s.f.superuser()}.run(t, c.tamper(s)...)
			if v, err := s.f.db.VerifyAuditLog(ctx, s.owner, s.ws, nil, s.keys, nil); err != nil || v.Valid {
				t.Fatalf("verify after the tampering: %+v, %v; want invalid", v, err)
			}
			s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.created", "8", nil), nil)
			storetest.SealAll(t, s.sealer)
			if _, err := s.sealer.Round(ctx); err != nil { // a sweep too
				t.Fatal(err)
			}
			s.checkNothingSignedPast(t, 5)
			if cp, err := s.sealer.Checkpoint(ctx, s.ws); err == nil {
				t.Errorf("Checkpoint signed position %d over a seal that does not recompute", cp.Position)
			}
			// A restarted sealer too.
			if cp, err := s.newSealer().Checkpoint(ctx, s.ws); err == nil {
				t.Errorf("a restarted sealer's Checkpoint signed position %d over a seal that does not recompute", cp.Position)
			}
			if n := s.sealer.WithheldCheckpoints(); n != 1 {
				t.Errorf("WithheldCheckpoints = %d, want 1: the rounds' and Checkpoint's finding, counted once", n)
			}
			s.checkLogged(t, "8")
		})
	}
}

// A chain far past its last checkpoint is checked a share of the round's
// budget at a time (at least 100 seals), each round going on from where the
// one before stopped: it is signed once the rounds reached its head, or
// withheld by the round that reaches a seal that does not recompute.
func TestSealerChecksAFarChainInShares(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// edit is the position of the event edited (0: none).
		edit int
	}{
		{"intact", 0},
		{"an event edited 300 seals past the checkpoint", 301},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAuditFixture(t)
			insert := func(n int) {
				t.Helper()
				if _, err := f.db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, metadata)
					SELECT gen_random_uuid(), 'anonymous', 'user.login_failed', 'user', i::text, clock_timestamp(), '{}'
					FROM generate_series(1, $1) i`, n); err != nil {
					t.Fatal(err)
				}
			}
			insert(1)
			f.seal()
			sealer := &store.AuditSealer{DB: f.db, Key: audit.GenerateSigningKey(), CheckpointEvery: time.Nanosecond}
			if cp, err := sealer.Checkpoint(ctx, "anonymous"); err != nil || cp.Position != 1 {
				t.Fatalf("checkpoint: %+v, %v", cp, err)
			}
			insert(350)
			f.seal() // head at 351
			if c.edit > 0 {
				tamperer{f.superuser()}.run(t, tamperStmt{`UPDATE audit_events SET metadata = '{"edited": true}'
					WHERE id = (SELECT event_id FROM audit_seals WHERE chain_key = 'anonymous' AND position = $1)`, []any{c.edit}})
			}
			// Shares of 100 seals: 1-101, 101-201, 201-301, 301-351.
			for i := 1; i <= 4; i++ {
				r, err := store.SealRoundWithin(ctx, sealer, 1)
				if err != nil {
					t.Fatal(err)
				}
				cp, err := f.db.LatestAuditCheckpoint(ctx, "anonymous", []ed25519.PublicKey{sealer.Key.Public().(ed25519.PublicKey)})
				if err != nil {
					t.Fatal(err)
				}
				signed := i == 4 && c.edit == 0
				if (cp.Position == 351) != signed || r.Checkpoints != map[bool]int{true: 1}[signed] {
					t.Errorf("round %d: checkpoint at %d, %d signed by the round; want it signed: %v", i, cp.Position, r.Checkpoints, signed)
				}
				withheld := uint64(0)
				if c.edit > 0 && i >= 3 {
					withheld = 1 // from the round that reads 201-301 on, once
				}
				if n := sealer.WithheldCheckpoints(); n != withheld {
					t.Errorf("round %d: %d withheld, want %d", i, n, withheld)
				}
			}
		})
	}
}
