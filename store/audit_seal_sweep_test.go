package store_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/store"
)

// Found in review (2026-12-05): the checkpoint sweep read at most a page
// (1,000) of the chains due a checkpoint, in no order it controlled, and a
// chain it withholds stays due: as many tampered chains as a page were read
// first at every sweep, and the quiet chains after them never got their
// checkpoint. The sweep now goes through the chains due by their key, each
// page after the last one it read, and starts over after the last.
func TestSweepGoesPastChainsItWithholds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAuditFixture(t)
	insert := func(chain string, n int) {
		t.Helper()
		if _, err := f.db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, metadata)
			SELECT gen_random_uuid(), $1, 'user.login_failed', 'user', i::text, clock_timestamp(), '{}'
			FROM generate_series(1, $2) i`, chain, n); err != nil {
			t.Fatal(err)
		}
	}
	sealer := &store.AuditSealer{DB: f.db, Key: audit.GenerateSigningKey(), CheckpointEvery: time.Nanosecond}
	// Three chains withheld at every sweep (an event edited under its seal
	// since their checkpoint), then two quiet chains due a checkpoint: with
	// a page of two, five chains to sweep.
	var tampered []string
	for i := range 3 {
		chain := fmt.Sprintf("a-tampered:%d", i)
		insert(chain, 2)
		f.seal()
		if _, err := sealer.Checkpoint(ctx, chain); err != nil {
			t.Fatal(err)
		}
		insert(chain, 1)
		tampered = append(tampered, chain)
	}
	f.seal()
	for _, chain := range tampered {
		tamperer{f.superuser()}.run(t, tamperStmt{`UPDATE audit_events SET metadata = '{"edited": true}'
			WHERE id = (SELECT event_id FROM audit_seals WHERE chain_key = $1 AND position = 3)`, []any{chain}})
	}
	quiet := []string{"b-quiet:0", "b-quiet:1"}
	for _, chain := range quiet {
		insert(chain, 1)
	}
	f.seal()
	// Three sweeps of two cover the five chains.
	for range 3 {
		if _, err := store.SealRoundPaged(ctx, sealer, 2); err != nil {
			t.Fatal(err)
		}
	}
	for _, chain := range quiet {
		if cp, err := f.db.LatestAuditCheckpoint(ctx, chain, []ed25519.PublicKey{sealer.Key.Public().(ed25519.PublicKey)}); err != nil || cp == nil {
			t.Errorf("quiet chain %s after three sweeps of two chains: checkpoint %+v, %v; withheld %d times",
				chain, cp, err, sealer.WithheldCheckpoints())
		}
	}
	for _, chain := range tampered {
		if cp, err := f.db.LatestAuditCheckpoint(ctx, chain, []ed25519.PublicKey{sealer.Key.Public().(ed25519.PublicKey)}); err != nil || cp == nil || cp.Position != 2 {
			t.Errorf("tampered chain %s: checkpoint %+v, %v; want the one of position 2", chain, cp, err)
		}
	}
}

// Found in review (2026-12-05): auditCheckpoint answers only checkpoints of
// the keys the server trusts, and after a key rotation a chain that had its
// head signed by the old key was never swept again (its checkpoint covered
// its head), so a quiet workspace had no checkpoint to answer until its
// next event. The sweep now also signs, with the sealer's key, the head of
// a chain whose last checkpoint another key signed.
func TestSweepSignsAgainAfterAKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAuditFixture(t)
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), 'quiet', 'user.login_failed', 'user', i::text, clock_timestamp(), '{}'
		FROM generate_series(1, 3) i`); err != nil {
		t.Fatal(err)
	}
	f.seal()
	old := &store.AuditSealer{DB: f.db, Key: audit.GenerateSigningKey(), CheckpointEvery: time.Nanosecond}
	if _, err := store.SealRoundPaged(ctx, old, 10); err != nil {
		t.Fatal(err)
	}
	oldPub := old.Key.Public().(ed25519.PublicKey)
	if cp, err := f.db.LatestAuditCheckpoint(ctx, "quiet", []ed25519.PublicKey{oldPub}); err != nil || cp == nil || cp.Position != 3 {
		t.Fatalf("the old key's checkpoint: %+v, %v; want position 3", cp, err)
	}
	rotated := &store.AuditSealer{DB: f.db, Key: audit.GenerateSigningKey(), CheckpointEvery: time.Nanosecond}
	newPub := rotated.Key.Public().(ed25519.PublicKey)
	if _, err := store.SealRoundPaged(ctx, rotated, 10); err != nil {
		t.Fatal(err)
	}
	cp, err := f.db.LatestAuditCheckpoint(ctx, "quiet", []ed25519.PublicKey{newPub})
	if err != nil || cp == nil || cp.Position != 3 || cp.Verify(newPub) != nil {
		t.Fatalf("after a sweep with the new key: checkpoint %+v, %v; want the head, position 3, signed by the new key", cp, err)
	}
	// Signed once: the next sweep has nothing to sign of it.
	round, err := store.SealRoundPaged(ctx, rotated, 10)
	if err != nil || round.Checkpoints != 0 {
		t.Errorf("the sweep after: %+v, %v; want no checkpoint", round, err)
	}
}
