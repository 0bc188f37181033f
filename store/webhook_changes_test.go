package store_test

import (
	"context"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
	"time"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// A webhook endpoint's creation is the actor's role, read before the URL is
// resolved, then one round trip; its update, enabling, disabling, secret
// rotation and ping are one round trip each: BEGIN, the check (the endpoint locked, the actor
// an OWNER or ADMIN), the change with its event (the ping: its event), and
// COMMIT. A refused one is refused by the check in its first round trip. A
// keyed rotation carries its idempotency record, the endpoint and the new
// secret as returned, in the same round trip, and the secret it replaced
// keeps signing for WebhookSecretOverlap.
func TestWebhookEndpointChangesAreOneRoundTrip(t *testing.T) {
	t.Parallel()
	f := newRoundTripFixture(t)
	db, pool, rec, ctx := f.db, f.pool, f.rec, t.Context()
	rec.take()
	created, err := db.CreateWebhookEndpoint(ctx, f.admin, store.WebhookEndpointInput{WorkspaceID: f.ws, URL: hookURL})
	if err != nil {
		t.Fatal(err)
	}
	// The role first, before the URL's DNS lookup, then the unit of work.
	if trips := rec.take(); len(trips) != 2 || !strings.HasPrefix(trips[0], "select role from members") ||
		!strings.HasPrefix(trips[1], "begin ; select taskflow_check(") || !strings.Contains(trips[1], "insert into webhook_endpoints") ||
		!strings.HasSuffix(trips[1], "; commit") {
		t.Fatalf("create: round trips %q: want the role's read, then BEGIN, the checks, the endpoint, its event and COMMIT", trips)
	}
	id := created.Endpoint.ID
	stored, err := db.WebhookEndpoint(ctx, f.admin, id)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.CreatedAt.Equal(created.Endpoint.CreatedAt) {
		t.Fatalf("created at %v, stored %v", created.Endpoint.CreatedAt, stored.CreatedAt)
	}
	stored.CreatedAt, stored.UpdatedAt = created.Endpoint.CreatedAt, created.Endpoint.UpdatedAt
	if !reflect.DeepEqual(stored, created.Endpoint) {
		t.Fatalf("created %+v, stored %+v", created.Endpoint, stored)
	}
	for _, c := range []struct {
		action, statement string
		change            func(actor *store.User) error
	}{
		{"webhook.updated", "update webhook_endpoints", func(a *store.User) error {
			_, err := db.UpdateWebhookEndpoint(ctx, a, id, store.WebhookEndpointPatch{Description: ptr("ops"), SetDescription: true})
			return err
		}},
		{"webhook.disabled", "update webhook_endpoints", func(a *store.User) error {
			_, err := db.SetWebhookEndpointEnabled(ctx, a, id, false, ptr("maintenance"))
			return err
		}},
		{"webhook.enabled", "update webhook_endpoints", func(a *store.User) error {
			_, err := db.SetWebhookEndpointEnabled(ctx, a, id, true, nil)
			return err
		}},
		{"webhook.secret_rotated", "update webhook_endpoints", func(a *store.User) error {
			_, err := db.RotateWebhookSecret(ctx, a, id)
			return err
		}},
		{"webhook.pinged", "insert into audit_events", func(a *store.User) error {
			return db.PingWebhookEndpoint(ctx, a, id)
		}},
	} {
		rec.take()
		assertRefusedByCheck(t, rec, c.action, orderedCheck, []*store.User{f.member}, c.change)
		if err := c.change(f.admin); err != nil {
			t.Fatalf("%s: %v", c.action, err)
		}
		trips := rec.take()
		if len(trips) != 1 || !strings.HasPrefix(trips[0], orderedCheck) ||
			!strings.Contains(trips[0], c.statement) || !strings.HasSuffix(trips[0], "; commit") {
			t.Fatalf("%s: round trips %q: want one, BEGIN, the check, the change with its event and COMMIT", c.action, trips)
		}
		var events int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = $1 AND entity_id = $2`,
			c.action, id).Scan(&events); err != nil || events != 1 {
			t.Fatalf("%s: %d events (%v), want 1", c.action, events, err)
		}
	}
	// A new URL: the role first, before its DNS lookup (as create), then the
	// unit of work.
	rec.take()
	if _, err := db.UpdateWebhookEndpoint(ctx, f.member, id, store.WebhookEndpointPatch{URL: ptr(hookURL + "2")}); errs.CodeOf(err) != errs.CodeForbidden {
		t.Fatalf("a MEMBER's new URL: %v", err)
	}
	if trips := rec.take(); len(trips) != 1 || !strings.HasPrefix(trips[0], "select e.id") {
		t.Fatalf("a MEMBER's new URL: round trips %q, want the endpoint's read only", trips)
	}
	if _, err := db.UpdateWebhookEndpoint(ctx, f.admin, id, store.WebhookEndpointPatch{URL: ptr(hookURL + "2")}); err != nil {
		t.Fatal(err)
	}
	if trips := rec.take(); len(trips) != 2 || !strings.HasPrefix(trips[0], "select e.id") ||
		!strings.HasPrefix(trips[1], orderedCheck) || !strings.HasSuffix(trips[1], "; commit") {
		t.Fatalf("a new URL: round trips %q: want the endpoint's read, then BEGIN, the check, the change and COMMIT", trips)
	}
	// The ping records the URL redacted, with its hash (never its path).
	var pinged, pingedSum string
	if err := pool.QueryRow(ctx, `SELECT metadata->>'url', metadata->>'urlSha256' FROM audit_events WHERE action = 'webhook.pinged'`).
		Scan(&pinged, &pingedSum); err != nil || pinged != "https://203.0.113.10/…" || pingedSum != sha256Hex(hookURL) {
		t.Errorf("the ping's url: %q, urlSha256 %q (%v)", pinged, pingedSum, err)
	}

	var before []byte
	if err := pool.QueryRow(ctx, `SELECT secret FROM webhook_endpoints WHERE id = $1`, id).Scan(&before); err != nil {
		t.Fatal(err)
	}
	rec.take()
	var got *store.WebhookEndpointSecret
	err = db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := db.ClaimIdempotencyKeyAhead(ctx, f.admin.ID, "rotate", "rotateWebhookSecret", []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		var err error
		if got, err = db.RotateWebhookSecret(ctx, f.admin, id); err != nil {
			return err
		}
		return db.SaveIdempotencyValue(ctx, f.admin.ID, "rotate", got)
	})
	if err != nil {
		t.Fatal(err)
	}
	if trips := rec.take(); len(trips) != 1 || !strings.Contains(trips[0], "update webhook_endpoints") ||
		!strings.Contains(trips[0], "insert into idempotency_keys") || !strings.HasSuffix(trips[0], "; commit") {
		t.Fatalf("keyed rotation: round trips %q, want one: the claim, the check, the rotation, the record, COMMIT", trips)
	}
	stored, err = db.WebhookEndpoint(ctx, f.admin, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Endpoint.URL != hookURL+"2" || got.Endpoint.UpdatedAt != stored.UpdatedAt {
		t.Errorf("rotation returned %+v, stored %+v", got.Endpoint, stored)
	}
	assertRecordIs(t, db, f.admin.ID, "rotate", got)
	var secret, previous []byte
	var overlap time.Duration
	if err := pool.QueryRow(ctx, `SELECT secret, previous_secret, previous_until - updated_at FROM webhook_endpoints WHERE id = $1`,
		id).Scan(&secret, &previous, &overlap); err != nil {
		t.Fatal(err)
	}
	if want, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(got.Secret, "whsec_")); string(secret) != string(want) ||
		string(previous) != string(before) || overlap != store.WebhookSecretOverlap ||
		stored.PreviousSecretUntil == nil || !stored.PreviousSecretUntil.Equal(stored.UpdatedAt.Add(store.WebhookSecretOverlap)) {
		t.Errorf("after the rotation: the secret is the one returned: %v; the previous one is the one before: %v; overlap %v, until %v",
			string(secret) == string(want), string(previous) == string(before), overlap, stored.PreviousSecretUntil)
	}
}

// The changes Postgres records for an endpoint's update, enabling and
// disabling are audit.Changes of the endpoint before and the endpoint
// returned, which is the one committed; a change that changes nothing
// records nothing (disabling a disabled endpoint keeps its reason, enabling
// an enabled one its failure streak); disabling stamps disabledAt and keeps
// the failure streak, enabling clears both; and a keyed change's record
// decodes to the endpoint returned.
func TestWebhookEndpointChangesInSQLAreGos(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	id := f.endpoint(t)
	read := func() (*store.WebhookEndpoint, error) { return f.db.WebhookEndpoint(ctx, f.owner, id) }
	i := 0
	update := func(p store.WebhookEndpointPatch) {
		t.Helper()
		assertUpdateRecorded(t, f.db, "webhook.updated", id, read, func(ctx context.Context) (*store.WebhookEndpoint, error) {
			return f.db.UpdateWebhookEndpoint(ctx, f.owner, id, p)
		}, i)
		i++
	}
	enable := func(on bool, reason *string) *store.WebhookEndpoint {
		t.Helper()
		action := map[bool]string{true: "webhook.enabled", false: "webhook.disabled"}[on]
		assertUpdateRecorded(t, f.db, action, id, read, func(ctx context.Context) (*store.WebhookEndpoint, error) {
			return f.db.SetWebhookEndpointEnabled(ctx, f.owner, id, on, reason)
		}, i)
		i++
		e, err := read()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, p := range []store.WebhookEndpointPatch{
		{URL: ptr(hookURL + "/a")},
		{URL: ptr(hookURL + "/a")}, // the same
		{SetDescription: true, Description: ptr("quote \" back \\ slash ü <b>\n\ttab")},
		{SetDescription: true},
		{SetDescription: true}, // null again
		{Actions: []string{"task.*", "comment.created", "task.*"}},
		{Actions: []string{"comment.created", "task.*"}}, // the same, cleaned
		{Actions: []string{}}, // every action
		{},
		{URL: ptr(hookURL), SetDescription: true, Description: ptr("d"), Actions: []string{"project.updated"}},
	} {
		update(p)
	}

	failing := func() {
		t.Helper()
		if _, err := f.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = '2026-01-02 03:04:05.678901+00' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	failing()
	e := enable(false, nil)
	if e.Enabled || e.DisabledReason == nil || *e.DisabledReason != "disabled by an admin" || e.DisabledAt == nil || e.FailingSince == nil {
		t.Errorf("disabled: %+v", e)
	}
	if again := enable(false, ptr("another reason")); *again.DisabledReason != "disabled by an admin" || !again.DisabledAt.Equal(*e.DisabledAt) {
		t.Errorf("disabled again: %+v", again)
	}
	if e = enable(true, nil); !e.Enabled || e.DisabledReason != nil || e.DisabledAt != nil || e.FailingSince != nil {
		t.Errorf("enabled: %+v", e)
	}
	failing()
	if e = enable(true, nil); e.FailingSince == nil {
		t.Errorf("enabled again: the failure streak was cleared: %+v", e)
	}
	if e = enable(false, ptr("  why  ")); *e.DisabledReason != "why" {
		t.Errorf("disabled with a reason: %+v", e)
	}
	storetest.Seal(t, f.db)
	if r, err := f.db.VerifyAuditLog(ctx, f.owner, f.workspace, nil, nil, nil); err != nil || !r.Valid {
		t.Fatalf("verify: %+v %v", r, err)
	}
}

// Concurrent creations never take a workspace past MaxWebhookEndpoints: the
// bound is counted in a statement that starts once the workspace's lock is
// held, so it sees the endpoints of the creation it waited for. Ten rounds of
// eight creations at once, two places left each time.
func TestConcurrentEndpointCreationsKeepTheBound(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	for range store.MaxWebhookEndpoints - 2 {
		f.endpoint(t)
	}
	const n = 8
	for round := range 10 {
		results := make(chan error, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				_, err := f.db.CreateWebhookEndpoint(ctx, f.owner, store.WebhookEndpointInput{WorkspaceID: f.workspace, URL: hookURL})
				results <- err
			}()
		}
		close(start)
		created := 0
		for range n {
			switch err := <-results; errs.CodeOf(err) {
			case "":
				created++
			case errs.CodeConflict:
			default:
				t.Errorf("a creation: %v", err)
			}
		}
		var count int
		if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE workspace_id = $1`, f.workspace).Scan(&count); err != nil {
			t.Fatal(err)
		}
		if created != 2 || count != store.MaxWebhookEndpoints {
			t.Fatalf("round %d: %d of %d concurrent creations succeeded, %d endpoints: want 2 and %d", round, created, n, count, store.MaxWebhookEndpoints)
		}
		if _, err := f.db.Pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id IN (SELECT id FROM webhook_endpoints
			WHERE workspace_id = $1 ORDER BY created_at DESC LIMIT 2)`, f.workspace); err != nil {
			t.Fatal(err)
		}
	}
}
