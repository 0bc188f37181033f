package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"taskflow/store"
)

// Known gap (2026-12-05): the server's database role can insert an event
// with an old occurred_at; the sealer seals it at the head of its chain and
// verifyAuditLog said nothing, so an auditor reading the log by time saw it
// among older events with no sign that it was written later. Chain order is
// the order of the writing transactions, so in it occurred_at runs back by
// no more than store.BackdateTolerance: verify counts the events that run
// back further (backdatedEvents, firstBackdatedEventId) and leaves valid
// alone, and an event back by less is not counted.
func TestVerifyFlagsABackdatedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		back    time.Duration
		flagged bool
	}{
		{"an hour old", time.Hour, true},
		{"within the tolerance", store.BackdateTolerance - time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newAuditFixture(t)
			owner, ws := f.ownedWorkspace(3)
			// As the server's role would write it: a plain insert of an
			// event whose occurred_at is in the past, after the others.
			f.append(ctx, auditWsEvent(ws, owner, "task.deleted", "backdated", nil), func() time.Time { return time.Now().Add(-c.back) })
			f.append(ctx, auditWsEvent(ws, owner, "task.created", "after", nil), nil)
			f.seal()
			ids := chainSeals(t, f.db, ws)
			if len(ids) != 5 {
				t.Fatalf("%d seals, want 5", len(ids))
			}
			v, err := f.db.VerifyChain(ctx, ws)
			if err != nil {
				t.Fatal(err)
			}
			want, wantID := 0, "<nil>"
			if c.flagged {
				want, wantID = 1, ids[3]
			}
			if !v.Valid || v.SealedEvents != 5 || v.BackdatedEvents != want || fmt.Sprint(deref(v.FirstBackdatedEventID)) != wantID {
				t.Fatalf("event %s written %s back: valid %v, %d sealed, backdatedEvents %d, firstBackdatedEventId %v; want valid, 5, %d, %s",
					ids[3], c.back, v.Valid, v.SealedEvents, v.BackdatedEvents, deref(v.FirstBackdatedEventID), want, wantID)
			}
		})
	}
}

// An untouched log reports no backdated event.
func TestVerifyFlagsNoBackdatedEventInAnUntouchedLog(t *testing.T) {
	t.Parallel()
	f, ws, _ := sealedChain(t)
	v, err := f.db.VerifyChain(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Valid || v.BackdatedEvents != 0 || v.FirstBackdatedEventID != nil {
		t.Fatalf("untouched log: valid %v, backdatedEvents %d, firstBackdatedEventId %v", v.Valid, v.BackdatedEvents, deref(v.FirstBackdatedEventID))
	}
}

// deref returns *p, or "<nil>" for nil.
func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
