package store_test

import (
	"context"
	"testing"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Found in review (2026-12-05): a chain withheld stays due, and
// WithheldCheckpoints (taskflow_audit_checkpoints_withheld_total) counted it
// again at every round that found it (each sweep, every 10 s by default,
// and each round that sealed its new events) until it was repaired: one
// tampered chain inflated the counter for as long as it stayed so. It now
// counts each checkpoint withheld once: a chain once for the last checkpoint
// it fails to extend (or to recompute from), however many rounds and
// Checkpoint calls find it, and again once it was repaired (signed again)
// and tampered anew. The ERROR line stays at every round that finds it: the
// chain is still unsigned, and an alert on recent ERROR lines keeps firing
// until someone acts.
func TestWithheldCountsATamperingOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupExtend(t) // a checkpoint at 5
	s.sealTwoMore(t)    // 6 and 7, sealed without one
	edit := func(pos int64, metadata string) tamperStmt {
		return tamperStmt{`UPDATE audit_events SET metadata = $2::jsonb
			WHERE id = (SELECT event_id FROM audit_seals WHERE chain_key = $1 AND position = $3)`, []any{s.ws, metadata, pos}}
	}
	metadataAt := func(pos int64) string {
		t.Helper()
		var m string
		if err := s.f.db.Pool.QueryRow(ctx, `SELECT e.metadata::text FROM audit_events e JOIN audit_seals x ON x.event_id = e.id
			WHERE x.chain_key = $1 AND x.position = $2`, s.ws, pos).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// rounds appends an event and seals it, then sweeps, n times: each round
	// is due to sign the chain.
	rounds := func(n int) {
		t.Helper()
		for range n {
			s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.updated", "", nil), nil)
			storetest.SealAll(t, s.sealer)
			if _, err := s.sealer.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	recomputeLines := func() int {
		return s.errorLines(func(l map[string]any) bool { return jsonNumber(l["first_bad_position"]) == "6" })
	}
	original := metadataAt(6)
	su := tamperer{s.f.superuser()}
	su.run(t, edit(6, `{"title": "rewritten"}`))
	rounds(5)
	if cp, err := s.sealer.Checkpoint(ctx, s.ws); err == nil {
		t.Fatalf("Checkpoint signed position %d over an edited event", cp.Position)
	}
	s.checkNothingSignedPast(t, 5)
	if n := s.sealer.WithheldCheckpoints(); n != 1 {
		t.Errorf("one tampering found by 10 rounds and a Checkpoint: WithheldCheckpoints = %d, want 1", n)
	}
	if n := recomputeLines(); n < 6 {
		t.Errorf("%d ERROR lines, want one at each round that found the chain withheld and at Checkpoint:\n%s", n, s.log)
	}

	// Repaired: signed again, nothing more counted.
	su.run(t, edit(6, original))
	rounds(1)
	cp, err := s.f.db.LatestAuditCheckpoint(ctx, s.ws, s.keys)
	if err != nil || cp == nil || cp.Position != 13 {
		t.Fatalf("after the repair: checkpoint %+v, %v; want the head, 13", cp, err)
	}
	if n := s.sealer.WithheldCheckpoints(); n != 1 {
		t.Errorf("after the repair: WithheldCheckpoints = %d, want 1", n)
	}

	// Tampered anew, past the new checkpoint: counted once more.
	s.f.append(ctx, auditWsEvent(s.ws, s.owner, "task.updated", "", nil), nil)
	storetest.SealAll(t, &store.AuditSealer{DB: s.f.db}) // 14, without a checkpoint
	su.run(t, edit(14, `{"title": "rewritten again"}`))
	rounds(3)
	if n := s.sealer.WithheldCheckpoints(); n != 2 {
		t.Errorf("a second tampering, after the repair: WithheldCheckpoints = %d, want 2", n)
	}
}
