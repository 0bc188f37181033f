package store_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// An invitation, its acceptance, its refusal and its revocation are one
// round trip each: BEGIN, the checks (the workspace or the invitation
// locked, the actor's role, the invitation's rules), the change with its
// event, COMMIT. A refused one is refused by a check in its first round
// trip. A keyed invitation or acceptance carries its idempotency record in
// the same round trip, whose result is what it returned. Each event holds
// what Go's audit recorded for it: the invitation's snapshot, and for
// member.joined the membership's with the invitation's id, e-mail and
// inviter.
func TestInvitationChangesAreOneRoundTrip(t *testing.T) {
	t.Parallel()
	f := newRoundTripFixture(t)
	db, pool, rec, ctx := f.db, f.pool, f.rec, t.Context()
	invitee := mkUser(t, db, "invitee@example.com")
	oneTrip := func(what string, has ...string) {
		t.Helper()
		trips := rec.take()
		ok := len(trips) == 1 && strings.HasPrefix(trips[0], "begin ; ") && strings.Contains(trips[0], "select taskflow_check(") &&
			strings.HasSuffix(trips[0], "; commit")
		for _, h := range has {
			ok = ok && strings.Contains(trips[0], h)
		}
		if !ok {
			t.Fatalf("%s: round trips %q: want one, BEGIN, the checks, %q and COMMIT", what, trips, has)
		}
	}
	event := func(action string) map[string]any {
		t.Helper()
		var text []byte
		if err := pool.QueryRow(ctx, `SELECT metadata::text FROM audit_events WHERE action = $1 ORDER BY seq DESC LIMIT 1`,
			action).Scan(&text); err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		m, err := audit.DecodeMetadata(text)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	assertEvent := func(action string, want map[string]any) {
		t.Helper()
		norm, err := audit.NormalizeMetadata(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := event(action); !reflect.DeepEqual(got, norm) {
			t.Errorf("%s: metadata\n  %v\nwant %v", action, got, norm)
		}
	}
	invite := func(key string) *store.Invitation {
		t.Helper()
		rec.take()
		var inv *store.Invitation
		err := db.UnitOfWork(ctx, func(ctx context.Context) error {
			if key != "" {
				if _, err := db.ClaimIdempotencyKeyAhead(ctx, f.admin.ID, key, "inviteMember", []byte("fp"), time.Hour, time.Second); err != nil {
					return err
				}
			}
			var err error
			if inv, err = db.InviteMember(ctx, f.admin, f.ws, " Invitee@Example.com ", store.RoleMember); err != nil {
				return err
			}
			if inv.ID != "" {
				t.Errorf("the invitation before the commit: %+v, want nothing yet", inv)
			}
			if key == "" {
				return nil
			}
			return db.SaveIdempotencyValue(ctx, f.admin.ID, key, inv)
		})
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			oneTrip("keyed invitation", "delete from invitations", "insert into invitations", "insert into idempotency_keys")
			assertRecordIs(t, db, f.admin.ID, key, inv)
		} else {
			oneTrip("invitation", "delete from invitations", "insert into invitations")
		}
		if inv.ID == "" || inv.WorkspaceID != f.ws || inv.WorkspaceName != "W" || inv.Email != invitee.Email ||
			inv.Role != store.RoleMember || inv.InvitedByID == nil || *inv.InvitedByID != f.admin.ID ||
			!inv.ExpiresAt.Equal(inv.CreatedAt.Add(store.InvitationLifetime)) {
			t.Fatalf("invitation %+v", inv)
		}
		assertEvent("member.invited", audit.Snapshot(inv))
		return inv
	}

	rec.take()
	assertRefusedByCheck(t, rec, "invite", plainCheck, []*store.User{f.member, f.viewer}, func(a *store.User) error {
		_, err := db.InviteMember(ctx, a, f.ws, "x@example.com", store.RoleMember)
		return err
	})
	inv := invite("invite")
	rec.take()
	assertRefusedByCheck(t, rec, "decline", plainCheck, []*store.User{f.admin}, func(a *store.User) error {
		return db.DeclineInvitation(ctx, a, inv.ID)
	})
	rec.take()
	if err := db.DeclineInvitation(ctx, invitee, inv.ID); err != nil {
		t.Fatal(err)
	}
	oneTrip("decline", "delete from invitations", "insert into audit_events")
	assertEvent("member.invitation_declined", audit.Snapshot(inv))

	inv = invite("")
	rec.take()
	assertRefusedByCheck(t, rec, "revoke", plainCheck, []*store.User{invitee}, func(a *store.User) error {
		return db.RevokeInvitation(ctx, a, inv.ID)
	})
	if err := db.RevokeInvitation(ctx, f.admin, strings.ToUpper(inv.ID)); err != nil {
		t.Fatal(err)
	}
	oneTrip("revoke", "delete from invitations", "insert into audit_events")
	assertEvent("member.invitation_revoked", audit.Snapshot(inv))

	inv = invite("")
	rec.take()
	assertRefusedByCheck(t, rec, "accept", plainCheck, []*store.User{f.admin}, func(a *store.User) error {
		_, err := db.AcceptInvitation(ctx, a, inv.ID)
		return err
	})
	var ws *store.Workspace
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := db.ClaimIdempotencyKeyAhead(ctx, invitee.ID, "accept", "acceptInvitation", []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		var err error
		if ws, err = db.AcceptInvitation(ctx, invitee, inv.ID); err != nil {
			return err
		}
		return db.SaveIdempotencyValue(ctx, invitee.ID, "accept", ws)
	})
	if err != nil {
		t.Fatal(err)
	}
	oneTrip("keyed accept", "insert into members", "insert into idempotency_keys")
	assertRecordIs(t, db, invitee.ID, "accept", ws)
	seen, err := db.WorkspacesByIDs(ctx, invitee.ID, []string{f.ws})
	if err != nil || !reflect.DeepEqual(ws, seen[f.ws]) {
		t.Errorf("accept returned %+v, the new member sees %+v (%v)", ws, seen[f.ws], err)
	}
	joined := audit.Snapshot(&store.Member{WorkspaceID: f.ws, UserID: invitee.ID, Role: store.RoleMember})
	joined["invitationId"], joined["email"], joined["invitedById"] = inv.ID, inv.Email, inv.InvitedByID
	assertEvent("member.joined", joined)
	if _, err := db.InviteMember(ctx, f.admin, f.ws, invitee.Email, store.RoleMember); errs.CodeOf(err) != errs.CodeConflict {
		t.Errorf("an invitation of a member: %v, want CONFLICT", err)
	}

	storetest.Seal(t, db)
	if r, err := db.VerifyChain(ctx, f.ws); err != nil || !r.Valid {
		t.Fatalf("verify: %+v %v", r, err)
	}
}
