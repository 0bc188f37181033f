package store_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// Found in review (2026-12-04): a superuser who edits an event and
// recomputes the seals after it and the head (the sealer does it for them:
// delete the seals from the edited event on, move the head and the cursor
// back, let it seal again) leaves a chain consistent in itself, and
// verifyAuditLog called it valid, although the contract says an edit is
// found, and although the server holds a checkpoint it signed of the old
// head (audit_checkpoints). Every stored checkpoint signed by a trusted key
// must be extended by the log.
func TestVerifyFindsARewriteUnderAStoredCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, ids := sealedWorkspace(t)
	key := audit.GenerateSigningKey()
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	kept, err := (&store.AuditSealer{DB: f.db, Key: key}).Checkpoint(ctx, ws)
	if err != nil || kept == nil || kept.Position != 5 {
		t.Fatalf("checkpoint: %+v, %v", kept, err)
	}
	tamperer{f.superuser()}.run(t,
		tamperStmt{`UPDATE audit_events SET metadata = '{"title": "rewritten"}' WHERE id = $1`, []any{ids[1]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[1]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[2]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[3]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[4]}},
		tamperStmt{`UPDATE audit_chain_heads h SET head_hash = s.hash, event_id = s.event_id, event_at = s.occurred_at, events = 1
			FROM audit_seals s WHERE s.chain_key = h.chain_key AND s.position = 1 AND h.chain_key = $1`, []any{ws}},
		tamperStmt{`UPDATE audit_seal_cursor c SET tx_id = e.tx_id, seq = e.seq FROM audit_events e WHERE c.id = 1 AND e.id = $1`, []any{ids[0]}})
	storetest.SealAll(t, &store.AuditSealer{DB: f.db})
	if seals := chainSeals(t, f.db, ws); len(seals) != 5 || seals[1] != ids[1] {
		t.Fatalf("resealed: %v, want %v", seals, ids)
	}
	v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid {
		t.Fatalf("event 2 edited, seals 2-5 and the head recomputed under a stored checkpoint of position 5: verify = valid (%d sealed), want invalid",
			v.SealedEvents)
	}
	if v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != ids[4] {
		t.Errorf("firstInvalidEventId = %v, want the event at the stored checkpoint's position (%s)", v.FirstInvalidEventID, ids[4])
	}
	// A stored checkpoint whose signature does not verify with a trusted key
	// proves nothing: anyone who can insert rows could write one.
	other := []ed25519.PublicKey{audit.GenerateSigningKey().Public().(ed25519.PublicKey)}
	if v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, other, nil); err != nil || !v.Valid {
		t.Errorf("with a key that signed no stored checkpoint: %+v, %v", v, err)
	}
}

// A stored checkpoint row that was not signed by a trusted key (the server's
// role may insert rows: an insider could) does not make an intact log
// invalid.
func TestVerifyIgnoresAStoredCheckpointThatDoesNotVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, _ := sealedWorkspace(t)
	key := audit.GenerateSigningKey()
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	bogus := sha256.Sum256([]byte("not the head"))
	cp := audit.SignCheckpoint(key, ws, 3, bogus[:], time.Now())
	// The signature of another message under the trusted key's id.
	other := audit.SignCheckpoint(key, ws, 4, bogus[:], time.Now())
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO audit_checkpoints (chain_key, position, head_hash, signed_at, key_id, public_key, signature)
		VALUES ($1, 3, $2, $3, $4, $5, decode($6, 'base64'))`, ws, bogus[:], cp.SignedAt, cp.KeyID, []byte(keys[0]), other.Signature); err != nil {
		t.Fatal(err)
	}
	if v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, keys, nil); err != nil || !v.Valid {
		t.Fatalf("an intact log with a stored checkpoint whose signature fails: %+v, %v", v, err)
	}
}

// Found in review (2026-12-04): the sealer signed whatever audit_chain_heads
// said. That table is not append-only (the sealer moves the heads), so
// anyone with the server's database role, without a superuser or a trigger
// turned off, could write a head of their choosing and have the next sweep
// (or Checkpoint) sign it with the server's key: a genuine checkpoint of a
// position and hash the log never had. The sealer now signs only a head that
// the seal at its position vouches for.
func TestSealerSignsOnlyAHeadItsSealVouchesFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, ws, _ := sealedChain(t)
	key := audit.GenerateSigningKey()
	pub := key.Public().(ed25519.PublicKey)
	forged := sha256.Sum256([]byte("a head the log never had"))
	if _, err := f.db.Pool.Exec(ctx, `UPDATE audit_chain_heads SET head_hash = $2, events = 9, checkpoint_position = 0, checkpoint_at = NULL
		WHERE chain_key = $1`, ws, forged[:]); err != nil {
		t.Fatal(err)
	}
	sweeper := &store.AuditSealer{DB: f.db, Key: key, CheckpointEvery: time.Nanosecond}
	r, err := sweeper.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := f.db.LatestAuditCheckpoint(ctx, ws, []ed25519.PublicKey{pub}); err != nil {
		t.Fatal(err)
	} else if cp != nil {
		t.Errorf("the sweep signed a forged head (%d checkpoints): position %d, hash %s, %v (verifies: %v)",
			r.Checkpoints, cp.Position, cp.HeadHash, err, cp.Verify(pub) == nil)
	}
	if cp, err := sweeper.Checkpoint(ctx, ws); cp != nil {
		t.Errorf("Checkpoint signed a forged head: position %d, %v", cp.Position, err)
	} else if err == nil {
		t.Error("Checkpoint of a forged head: no error")
	}
	// A head whose hash alone was changed: the events sealed over it are
	// not signed either.
	if _, err := f.db.Pool.Exec(ctx, `UPDATE audit_chain_heads h SET head_hash = $2, events = 5, checkpoint_position = 0, checkpoint_at = NULL
		WHERE chain_key = $1`, ws, forged[:]); err != nil {
		t.Fatal(err)
	}
	f.append(ctx, auditWsEvent(ws, nil, "task.created", "6", nil), nil)
	storetest.SealAll(t, sweeper)
	var signed int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_checkpoints WHERE chain_key = $1 AND position = 6`, ws).Scan(&signed); err != nil || signed != 0 {
		t.Errorf("signed a chain sealed over a forged head: %d checkpoints of position 6, %v", signed, err)
	}
}

// A checkpoint (stored, or kept by a customer) past the end of the log names
// the newest event left (TestCheckpointDetectsTruncation); a chain with
// nothing left to name, every event, seal and the head removed, is invalid
// with firstInvalidEventId null, never an empty id.
func TestVerifyOfAnEmptiedChainNamesNoEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, ids := sealedWorkspace(t)
	key := audit.GenerateSigningKey()
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	kept, err := (&store.AuditSealer{DB: f.db, Key: key}).Checkpoint(ctx, ws)
	if err != nil || kept == nil {
		t.Fatalf("checkpoint: %+v, %v", kept, err)
	}
	var stmts []tamperStmt
	for _, id := range ids {
		stmts = append(stmts, tamperStmt{`DELETE FROM audit_events WHERE id = $1`, []any{id}},
			tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{id}})
	}
	stmts = append(stmts, tamperStmt{`DELETE FROM audit_chain_heads WHERE chain_key = $1`, []any{ws}})
	tamperer{f.superuser()}.run(t, stmts...)
	for name, cp := range map[string]*audit.Checkpoint{"stored": nil, "kept": &kept.Checkpoint} {
		v, err := f.db.VerifyAuditLog(ctx, owner, ws, cp, keys, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v.Valid || v.FirstInvalidEventID != nil {
			t.Errorf("%s checkpoint over an emptied chain: valid %v, firstInvalidEventId %q, want invalid and null",
				name, v.Valid, str(v.FirstInvalidEventID))
		}
	}
}
