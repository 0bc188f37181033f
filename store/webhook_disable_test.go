package store_test

import (
	"testing"
	"time"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Disabling an endpoint ends its PENDING deliveries FAILED ("the endpoint is
// disabled"), as docs/api.md promises, at once: not at their next attempt,
// which may be hours away. Enabling it again before then must not resume
// them (the docs say to redeliver them); a ping stays PENDING (pings are
// delivered to a disabled endpoint), and so does an attempt in flight (its
// claim fails it when it is recorded and claimed again).
func TestDisablingEndsPendingDeliveriesAtOnce(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	ep := f.endpoint(t, "task.*")
	if _, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "waits for a retry"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "in flight"}); err != nil {
		t.Fatal(err)
	}
	if err := f.db.PingWebhookEndpoint(ctx, f.owner, ep); err != nil {
		t.Fatal(err)
	}
	storetest.DispatchAll(t, f.db)
	var waiting, flying, ping string
	if err := f.db.Pool.QueryRow(ctx, `SELECT
			(SELECT id::text FROM webhook_deliveries WHERE endpoint_id = $1 AND action = 'task.created' ORDER BY created_at, id LIMIT 1),
			(SELECT id::text FROM webhook_deliveries WHERE endpoint_id = $1 AND action = 'task.created' ORDER BY created_at DESC, id DESC LIMIT 1),
			(SELECT id::text FROM webhook_deliveries WHERE endpoint_id = $1 AND action = 'webhook.pinged')`, ep).
		Scan(&waiting, &flying, &ping); err != nil {
		t.Fatal(err)
	}
	// The first failed its first attempt and waits an hour for the next.
	if _, err := f.db.ClaimWebhookAttempt(ctx, waiting, time.Minute); err != nil {
		t.Fatal(err)
	}
	next := time.Now().Add(time.Hour)
	if err := f.db.RecordWebhookAttempt(ctx, waiting, store.WebhookOutcome{StatusCode: 500, Error: "HTTP 500",
		NextAttemptAt: &next, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	// The second is in flight.
	if _, err := f.db.ClaimWebhookAttempt(ctx, flying, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.SetWebhookEndpointEnabled(ctx, f.owner, ep, false, nil); err != nil {
		t.Fatal(err)
	}
	status := func(id string) (s store.WebhookDeliveryStatus, lastErr string, next *time.Time) {
		t.Helper()
		if err := f.db.Pool.QueryRow(ctx, `SELECT status, coalesce(last_error, ''), next_attempt_at
			FROM webhook_deliveries WHERE id = $1`, id).Scan(&s, &lastErr, &next); err != nil {
			t.Fatal(err)
		}
		return s, lastErr, next
	}
	if s, e, n := status(waiting); s != store.WebhookFailed || e != "the endpoint is disabled" || n != nil {
		t.Errorf("after disabling, the delivery waiting for its retry is %s (%q, next attempt %v), want FAILED (%q)",
			s, e, n, "the endpoint is disabled")
	}
	if s, _, _ := status(flying); s != store.WebhookPending {
		t.Errorf("the delivery in flight is %s, want PENDING until its attempt is recorded", s)
	}
	if s, _, _ := status(ping); s != store.WebhookPending {
		t.Errorf("the ping is %s, want PENDING: pings reach a disabled endpoint", s)
	}
	if _, err := f.db.SetWebhookEndpointEnabled(ctx, f.owner, ep, true, nil); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := status(waiting); s != store.WebhookFailed {
		t.Errorf("after enabling again, the delivery is %s: disabling did not end it", s)
	}
	if _, err := f.db.ClaimWebhookAttempt(ctx, waiting, time.Minute); err == nil {
		t.Errorf("its next attempt was claimed after the endpoint was disabled and enabled again")
	}
	if d, err := f.db.RedeliverWebhook(ctx, f.owner, waiting); err != nil || d.Status != store.WebhookPending {
		t.Errorf("redeliver after enabling: %+v %v", d, err)
	}
}

// The server's disabling of an endpoint failing for DisableAfter ends its
// other PENDING deliveries FAILED too, at once.
func TestServerDisablingEndsPendingDeliveriesAtOnce(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	ep := f.endpoint(t, "task.*")
	for _, title := range []string{"fails once more", "waits"} {
		if _, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: title}); err != nil {
			t.Fatal(err)
		}
	}
	storetest.DispatchAll(t, f.db)
	var failing, other string
	if err := f.db.Pool.QueryRow(ctx, `SELECT
			(SELECT id::text FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at, id LIMIT 1),
			(SELECT id::text FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1)`, ep).
		Scan(&failing, &other); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '2 hours' WHERE id = $1`, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ClaimWebhookAttempt(ctx, failing, time.Minute); err != nil {
		t.Fatal(err)
	}
	next := time.Now().Add(time.Hour)
	if err := f.db.RecordWebhookAttempt(ctx, failing, store.WebhookOutcome{StatusCode: 500, Error: "HTTP 500",
		NextAttemptAt: &next, DisableAfter: time.Hour, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := f.db.WebhookEndpoint(ctx, f.owner, ep)
	if err != nil || got.Enabled {
		t.Fatalf("the endpoint: %+v %v; want disabled by the server", got, err)
	}
	for _, id := range []string{failing, other} {
		var s store.WebhookDeliveryStatus
		if err := f.db.Pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s != store.WebhookFailed {
			t.Errorf("delivery %s is %s after the server disabled its endpoint, want FAILED", id, s)
		}
	}
}
