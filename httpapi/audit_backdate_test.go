package httpapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// AuditEvent.sealedAt is null while the event waits for the sealer and, once
// sealed, the time its seal was written (audit_seals.sealed_at).
func TestAuditEventSealedAt(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	id := e.event(t, e.ws, e.owner, "task.created", "t", nil)
	q := `query($ws: ID!) { auditEvents(workspaceId: $ws) { nodes { id sealed sealedAt } } }`
	type page struct {
		AuditEvents struct {
			Nodes []struct {
				ID       string
				Sealed   bool
				SealedAt *time.Time
			}
		}
	}
	read := func() (page, string) {
		t.Helper()
		res := e.Post(t, e.owner.Token, q, map[string]any{"ws": e.ws})
		var p page
		if res.Code() != "" || json.Unmarshal(res.Body.Data, &p) != nil || len(p.AuditEvents.Nodes) != 1 || p.AuditEvents.Nodes[0].ID != id {
			t.Fatalf("auditEvents: %s", res.Raw)
		}
		return p, string(res.Raw)
	}
	if p, raw := read(); p.AuditEvents.Nodes[0].Sealed || p.AuditEvents.Nodes[0].SealedAt != nil {
		t.Fatalf("before the sealer: %s, want sealed false and sealedAt null", raw)
	}
	e.Seal(t)
	var want time.Time
	if err := e.DB.Pool.QueryRow(context.Background(), `SELECT sealed_at FROM audit_seals WHERE event_id = $1`, id).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if p, raw := read(); !p.AuditEvents.Nodes[0].Sealed || p.AuditEvents.Nodes[0].SealedAt == nil || !p.AuditEvents.Nodes[0].SealedAt.Equal(want) {
		t.Fatalf("sealed: %s, want sealedAt %s", raw, want.Format(time.RFC3339Nano))
	}
}

// verifyAuditLog through GraphQL names an event written with an occurred_at
// an hour before the events before it in the chain (backdatedEvents,
// firstBackdatedEventId) and still calls the log valid; an untouched log
// has none.
func TestVerifyAuditLogBackdated(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	q := `query($ws: ID!) { verifyAuditLog(workspaceId: $ws) { valid sealedEvents backdatedEvents firstBackdatedEventId } }`
	type verification struct {
		VerifyAuditLog struct {
			Valid                 bool
			SealedEvents          int
			BackdatedEvents       int
			FirstBackdatedEventID *string
		}
	}
	verify := func() (verification, string) {
		t.Helper()
		res := e.Post(t, e.owner.Token, q, map[string]any{"ws": e.ws})
		var v verification
		if res.Code() != "" || json.Unmarshal(res.Body.Data, &v) != nil {
			t.Fatalf("verifyAuditLog: %s", res.Raw)
		}
		return v, string(res.Raw)
	}
	for range 3 {
		e.event(t, e.ws, e.owner, "task.created", "t", nil)
	}
	e.Seal(t)
	if v, raw := verify(); !v.VerifyAuditLog.Valid || v.VerifyAuditLog.BackdatedEvents != 0 || v.VerifyAuditLog.FirstBackdatedEventID != nil {
		t.Fatalf("untouched log: %s", raw)
	}
	e.at = e.at.Add(-time.Hour) // the next event occurred an hour before the last
	back := e.event(t, e.ws, e.owner, "task.deleted", "t", nil)
	e.Seal(t)
	v, raw := verify()
	if !v.VerifyAuditLog.Valid || v.VerifyAuditLog.SealedEvents != 4 || v.VerifyAuditLog.BackdatedEvents != 1 ||
		v.VerifyAuditLog.FirstBackdatedEventID == nil || *v.VerifyAuditLog.FirstBackdatedEventID != back {
		t.Fatalf("event %s backdated: %s, want valid with backdatedEvents 1 naming it", back, raw)
	}
}
