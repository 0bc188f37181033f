package store_test

import (
	"context"
	"crypto/ed25519"
	"testing"

	"taskflow/audit"
	"taskflow/store"
)

// Found in review (2026-12-04): a superuser slips in a forged event that
// reuses the id of an event
// already sealed (audit_events' key is (occurred_at, id), so the id may repeat
// at another time). The stray check of verifyAuditLog looks for "a seal with
// this event id" in any chain and at any time, so the forged row passes for
// sealed; auditEvents even shows it with the real event's seal.
func TestVerifyFindsAnEventCopyingASealedID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, ids := sealedWorkspace(t)
	tamperer{f.superuser()}.run(t, tamperStmt{`INSERT INTO audit_events (id, chain_key, workspace_id, action, entity_type, entity_id, occurred_at, tx_id, seq)
		SELECT id, chain_key, workspace_id, 'task.deleted', 'task', 'forged', occurred_at - interval '1 second', '3', 1
		FROM audit_events WHERE id = $1`, []any{ids[2]}})

	conn, err := f.db.AuditEvents(ctx, owner, ws, store.AuditFilter{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range conn.Nodes() {
		if e.EntityID == "forged" {
			t.Logf("auditEvents shows the forged event: sealed=%v", e.Sealed)
		}
	}
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid {
		t.Fatalf("a forged event slipped in with a sealed event's id: verify = valid (%d sealed, %d unsealed), want invalid",
			v.SealedEvents, v.UnsealedEvents)
	}
}

// Found in review (2026-12-04): a superuser slips in an event whose tx_id lies in the future. It is
// "past the sealer's cursor" forever (the sealer never reaches it: its tx_id
// stays above every horizon), so verifyAuditLog counts it as unsealed and
// calls the log valid, round after round.
func TestVerifyFindsAnEventWithAFutureTxID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, ws, ids := sealedChain(t)
	tamperer{f.superuser()}.run(t, tamperStmt{`INSERT INTO audit_events (id, chain_key, workspace_id, action, entity_type, entity_id, occurred_at, tx_id, seq)
		SELECT '0190c0de-0000-7000-8000-0000000000f7', chain_key, workspace_id, 'task.deleted', 'task', 'forged', occurred_at, '4000000000000000000', 1
		FROM audit_events WHERE id = $1`, []any{ids[2]}})
	for range 3 {
		if _, err := (&store.AuditSealer{DB: f.db}).Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid {
		t.Fatalf("an event slipped in with a future tx_id: verify = valid, %d unsealed forever; want invalid", v.UnsealedEvents)
	}
}

// Found in review (2026-12-04): seals at or before the chain's anchor are "retained": the walk checks
// only their place, never the hash of their event, even when the event is
// still there. A superuser who edits event 2 and writes an anchor at position
// 3 (a row retention would write) passes verifyAuditLog, and a signed
// checkpoint kept at position 5, which covers event 2, is still "extended".
func TestVerifyFindsAnEditBelowAForgedAnchor(t *testing.T) {
	t.Parallel()
	tamperBelowAForgedAnchor(t, "edited", `UPDATE audit_events SET metadata = '{"title":"forged"}' WHERE id = $1`, false)
}

// tamperBelowAForgedAnchor runs stmt on event 2 (its id is $1) of a sealed
// chain of five, as a superuser, with an anchor forged at position 3 (a row
// retention would write), and checks that verifyAuditLog finds the log
// invalid (at event 2 when at is set) and that a checkpoint kept at position
// 5 before, which covers event 2, no longer verifies nor extends.
func tamperBelowAForgedAnchor(t *testing.T, what, stmt string, at bool) {
	t.Helper()
	ctx := context.Background()
	f, ws, ids := sealedChain(t)
	key := audit.GenerateSigningKey()
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	kept, err := (&store.AuditSealer{DB: f.db, Key: key}).Checkpoint(ctx, ws)
	if err != nil || kept == nil || kept.Position != 5 {
		t.Fatalf("checkpoint: %+v, %v", kept, err)
	}
	tamperer{f.superuser()}.run(t,
		tamperStmt{stmt, []any{ids[1]}},
		tamperStmt{`INSERT INTO audit_chain_anchors (chain_key, hash, event_id, event_at, events)
			SELECT chain_key, hash, event_id, occurred_at, position FROM audit_seals WHERE event_id = $1`, []any{ids[2]}})
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid || at && (v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != ids[1]) {
		t.Errorf("event %s %s, anchor forged: verify = valid %v at %v (%d sealed), want invalid at it",
			ids[1], what, v.Valid, v.FirstInvalidEventID, v.SealedEvents)
	}
	cp := kept.Checkpoint
	cv, err := f.db.VerifyChainAgainst(ctx, ws, &cp, keys)
	if err != nil {
		t.Fatal(err)
	}
	if cv.Valid || cv.Checkpoint.Extended {
		t.Errorf("checkpoint at 5 kept before event 2 was %s: valid=%v extended=%v, want it caught", what, cv.Valid, cv.Checkpoint.Extended)
	}
}

// Found in review (2026-12-04): reads (auditEvents, /audit/export) select a workspace's events by
// workspace_id, verification walks and checks for strays by chain_key. An
// event slipped in with the workspace's id but another chain key is listed
// and exported as the workspace's, and verifyAuditLog never looks at it.
func TestVerifyFindsAWorkspaceEventInAnotherChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, ids := sealedWorkspace(t)
	tamperer{f.superuser()}.run(t, tamperStmt{`INSERT INTO audit_events (id, chain_key, workspace_id, action, entity_type, entity_id, occurred_at, tx_id, seq)
		SELECT '0190c0de-0000-7000-8000-0000000000f8', 'anonymous', workspace_id, 'task.deleted', 'task', 'forged', occurred_at, '3', 1
		FROM audit_events WHERE id = $1`, []any{ids[2]}})
	conn, err := f.db.AuditEvents(ctx, owner, ws, store.AuditFilter{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, e := range conn.Nodes() {
		listed = listed || e.EntityID == "forged"
	}
	v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if listed && v.Valid {
		t.Fatalf("auditEvents lists the slipped-in event as the workspace's, verifyAuditLog = valid (%d checked)", v.CheckedEvents)
	}
}

// sealedWorkspace is a workspace of owner with five sealed events, their
// ids in chain order.
func sealedWorkspace(t *testing.T) (*auditFixture, *store.User, string, []string) {
	t.Helper()
	f := newAuditFixture(t)
	owner, ws := f.ownedWorkspace(5)
	f.seal()
	return f, owner, ws, chainSeals(t, f.db, ws)
}

// Found in review (2026-12-04): a seal at or before the chain's anchor may
// lack its event (retention dropped its month), so the walk accepts any such
// seal without its event. A superuser who deletes event 2, still in a month
// that retention has not dropped (its partition is there), and writes an
// anchor at position 3 (a row retention would write) passes verifyAuditLog,
// and a signed checkpoint kept at position 5, which covers event 2, is still
// "extended". Retention drops the oldest months only: an event can be missing
// by retention only if it is older than every monthly partition left.
func TestVerifyFindsADeletionBelowAForgedAnchor(t *testing.T) {
	t.Parallel()
	tamperBelowAForgedAnchor(t, "deleted", `DELETE FROM audit_events WHERE id = $1`, true)
}

// Found in review (2026-12-04): a chain whose seals begin right after its
// anchor is taken for a legacy chain (retention dropped its events before
// seals existed). A superuser who deletes the first events of a live month
// with their seals and writes an anchor at the last of them leaves such a
// chain; the anchor names an event of a month whose partition is still
// there, which retention never leaves.
func TestVerifyFindsAForgedAnchorOverALiveMonth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, ws, ids := sealedChain(t)
	tamperer{f.superuser()}.run(t,
		tamperStmt{`INSERT INTO audit_chain_anchors (chain_key, hash, event_id, event_at, events)
			SELECT chain_key, hash, event_id, occurred_at, position FROM audit_seals WHERE event_id = $1`, []any{ids[1]}},
		tamperStmt{`DELETE FROM audit_events WHERE id = $1`, []any{ids[0]}},
		tamperStmt{`DELETE FROM audit_events WHERE id = $1`, []any{ids[1]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[0]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[1]}})
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid {
		t.Errorf("first two events and seals deleted, anchor forged: verify = valid (%d sealed), want invalid", v.SealedEvents)
	}
}
