package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// Deliveries of webhook.* events recorded before the URL redaction of
// 2026-12-04 kept the endpoint URL whole in their stored bodies, which every
// retry and redelivery sends as stored: migration 0016 rewrites url (and
// changes.url's from and to) as the audit log records them now, redacted
// with urlSha256 beside them, as package audit makes them in Go (for every
// URL of TestRedactURLInSQLIsGos). Bodies redacted already, those of
// webhook.* events without a URL and those of other events are left byte
// for byte; an attempt then sends the redacted body.
func TestMigrationRedactsWebhookDeliveryURLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := poolMigratedBefore(t, "0016")
	var ws, endpoint string
	if err := pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('w') RETURNING id`).Scan(&ws); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_endpoints (workspace_id, url, secret) VALUES ($1, 'https://receiver.example/hook', '\x00')
		RETURNING id`, ws).Scan(&endpoint); err != nil {
		t.Fatal(err)
	}
	type delivery struct {
		id   string
		body []byte
		want map[string]any // the metadata after the migration; nil: the body unchanged
	}
	var deliveries []delivery
	deliver := func(action string, metadata, want map[string]any) string {
		t.Helper()
		id := uuid.NewString()
		body, err := json.Marshal(store.WebhookPayload{Version: store.WebhookPayloadVersion, Type: action,
			Timestamp: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Data: store.WebhookEventData{EventID: uuid.NewString(),
				WorkspaceID: &ws, Action: action, EntityType: "webhook", EntityID: uuid.NewString(),
				OccurredAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Metadata: metadata}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, action, payload, next_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, now())`, id, endpoint, ws, uuid.NewString(), action, body); err != nil {
			t.Fatal(err)
		}
		deliveries = append(deliveries, delivery{id, body, want})
		return id
	}
	redacted := func(u string) map[string]any {
		return map[string]any{"url": audit.RedactURL(u), "urlSha256": audit.URLSha256(u)}
	}
	for _, u := range trickyURLs {
		deliver("webhook.pinged", map[string]any{"url": u}, redacted(u))
	}
	snapshot := func(u string) map[string]any {
		return map[string]any{"id": endpoint, "workspaceId": ws, "url": u, "description": "Slack", "actions": []any{"task.*"},
			"enabled": true, "disabledReason": nil, "createdById": nil}
	}
	withURL := func(m map[string]any, u string) map[string]any {
		m["url"], m["urlSha256"] = audit.RedactURL(u), audit.URLSha256(u)
		return m
	}
	created := deliver("webhook.created", snapshot(tokenURL), withURL(snapshot(tokenURL), tokenURL))
	deliver("webhook.deleted", snapshot(tokenURL2), withURL(snapshot(tokenURL2), tokenURL2))
	deliver("webhook.updated", map[string]any{"changes": map[string]any{
		"url":         map[string]any{"from": tokenURL, "to": tokenURL2},
		"description": map[string]any{"from": "a", "to": "b"}}},
		map[string]any{"changes": map[string]any{
			"url":         map[string]any{"from": tokenURLShown, "to": tokenURLShow2},
			"urlSha256":   map[string]any{"from": sha256Hex(tokenURL), "to": sha256Hex(tokenURL2)},
			"description": map[string]any{"from": "a", "to": "b"}}})
	// Left as they are.
	deliver("webhook.updated", map[string]any{"changes": map[string]any{"enabled": map[string]any{"from": true, "to": false}}}, nil)
	deliver("webhook.pinged", redacted(tokenURL), nil)
	deliver("webhook.updated", map[string]any{"changes": map[string]any{
		"url":       map[string]any{"from": tokenURLShown, "to": tokenURLShow2},
		"urlSha256": map[string]any{"from": sha256Hex(tokenURL), "to": sha256Hex(tokenURL2)}}}, nil)
	deliver("webhook.redelivered", map[string]any{"deliveryId": uuid.NewString(), "eventId": uuid.NewString(), "action": "task.created"}, nil)
	deliver("task.created", map[string]any{"title": "see https://x.example/a?b&c", "url": "https://x.example/a?b&c"}, nil)

	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, d := range deliveries {
		var body []byte
		if err := pool.QueryRow(ctx, `SELECT payload FROM webhook_deliveries WHERE id = $1`, d.id).Scan(&body); err != nil {
			t.Fatal(err)
		}
		if d.want == nil {
			if !bytes.Equal(body, d.body) {
				t.Errorf("a body to leave as it was became\n%s\nwas\n%s", body, d.body)
			}
			continue
		}
		var got, want map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		_ = json.Unmarshal(d.body, &want)
		want["data"].(map[string]any)["metadata"] = d.want
		wantJSON, _ := json.Marshal(want)
		_ = json.Unmarshal(wantJSON, &want) // as JSON decodes it
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body\n%s\nwant (in any order)\n%s", body, wantJSON)
		}
		for _, token := range urlTokens {
			if strings.Contains(string(body), token) {
				t.Errorf("body keeps %q: %s", token, body)
			}
		}
	}
	// What an attempt (a retry, a redelivery) sends.
	a, err := store.New(pool, nil).ClaimWebhookAttempt(ctx, created, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range urlTokens {
		if bytes.Contains(a.Payload, []byte(token)) {
			t.Errorf("an attempt sends %q: %s", token, a.Payload)
		}
	}
}

// poolMigratedBefore returns a pool on a new database with the migrations
// whose files sort before name applied, as the store of that time left it.
func poolMigratedBefore(t *testing.T, name string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtestdb.Custom(t, storetest.Config(t), pgtestdb.NoopMigrator{}).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob("migrations/*.sql")
	for _, file := range names {
		if filepath.Base(file) >= name {
			break
		}
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1)`, "migrations/"+filepath.Base(file)); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// An event recorded by a server of before the URL redaction of 2026-12-04
// (an old instance during a rolling upgrade, or one not dispatched yet when
// migration 0016 ran) keeps the endpoint URL whole in the log; the
// dispatcher builds its deliveries' bodies redacted as the log records
// URLs now (url and changes.url as scheme://host[:port]/…, urlSha256 beside
// them). A body redacted already (an event of the present server) is what it
// was byte for byte: the event's JSON as it is.
func TestDispatcherRedactsOldWebhookEventURLs(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	ep := f.endpoint(t, "webhook.*")
	snapshot := map[string]any{"id": ep, "workspaceId": f.workspace, "url": tokenURL, "description": "Slack",
		"actions": []any{"task.*"}, "enabled": true, "disabledReason": nil, "createdById": f.owner.ID}
	type event struct {
		action   string
		metadata map[string]any
		want     map[string]any // the metadata delivered; nil: as recorded
	}
	events := []event{
		{"webhook.created", snapshot, func() map[string]any {
			m := maps.Clone(snapshot)
			m["url"], m["urlSha256"] = tokenURLShown, sha256Hex(tokenURL)
			return m
		}()},
		{"webhook.pinged", map[string]any{"url": tokenURL2}, map[string]any{"url": tokenURLShow2, "urlSha256": sha256Hex(tokenURL2)}},
		{"webhook.updated", map[string]any{"changes": map[string]any{
			"url":         map[string]any{"from": tokenURL, "to": tokenURL2},
			"description": map[string]any{"from": "a", "to": "b"}}},
			map[string]any{"changes": map[string]any{
				"url":         map[string]any{"from": tokenURLShown, "to": tokenURLShow2},
				"urlSha256":   map[string]any{"from": sha256Hex(tokenURL), "to": sha256Hex(tokenURL2)},
				"description": map[string]any{"from": "a", "to": "b"}}}},
		// Recorded by the present server: left as they are.
		{"webhook.pinged", map[string]any{"url": tokenURLShown, "urlSha256": sha256Hex(tokenURL)}, nil},
		{"webhook.updated", map[string]any{"changes": map[string]any{
			"url":       map[string]any{"from": tokenURLShown, "to": tokenURLShow2},
			"urlSha256": map[string]any{"from": sha256Hex(tokenURL), "to": sha256Hex(tokenURL2)}}}, nil},
		{"webhook.updated", map[string]any{"changes": map[string]any{"enabled": map[string]any{"from": true, "to": false}}}, nil},
	}
	ids := make([]string, len(events))
	for i, e := range events {
		meta, _ := json.Marshal(e.metadata)
		// As a server of before 2026-12-04 recorded it (a ping is delivered
		// to its own endpoint only).
		if err := f.db.Pool.QueryRow(ctx, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, metadata)
			VALUES (gen_random_uuid(), $1::text, $1::text::uuid, $2, $3, 'webhook', $4, now(), $5) RETURNING id::text`,
			f.workspace, f.owner.ID, e.action, ep, meta).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	storetest.DispatchAll(t, f.db)
	for i, e := range events {
		var body []byte
		if err := f.db.Pool.QueryRow(ctx, `SELECT payload FROM webhook_deliveries WHERE endpoint_id = $1 AND event_id = $2`, ep, ids[i]).
			Scan(&body); err != nil {
			t.Fatalf("%s: %v", e.action, err)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		want := e.want
		if want == nil {
			want = e.metadata
			// Byte for byte what the dispatcher sent before: the event as recorded.
			var at time.Time
			if err := f.db.Pool.QueryRow(ctx, `SELECT occurred_at FROM audit_events WHERE id = $1`, ids[i]).Scan(&at); err != nil {
				t.Fatal(err)
			}
			wantBody, _ := json.Marshal(store.WebhookPayload{Version: store.WebhookPayloadVersion, Type: e.action, Timestamp: at.UTC(),
				Data: store.WebhookEventData{EventID: ids[i], WorkspaceID: &f.workspace, Action: e.action, EntityType: "webhook",
					EntityID: ep, ActorID: &f.owner.ID, OccurredAt: at.UTC(), Metadata: e.metadata}})
			if !bytes.Equal(body, wantBody) {
				t.Errorf("%s: a redacted body became\n%s\nwant\n%s", e.action, body, wantBody)
			}
		}
		wantJSON, _ := json.Marshal(want)
		var wantMeta any
		_ = json.Unmarshal(wantJSON, &wantMeta)
		if gotMeta := got["data"].(map[string]any)["metadata"]; !reflect.DeepEqual(gotMeta, wantMeta) {
			t.Errorf("%s: delivered metadata\n%v\nwant\n%v", e.action, gotMeta, wantMeta)
		}
		for _, token := range urlTokens {
			if bytes.Contains(body, []byte(token)) {
				t.Errorf("%s: the delivery sends %q: %s", e.action, token, body)
			}
		}
	}
	// The log itself is as recorded.
	var meta []byte
	if err := f.db.Pool.QueryRow(ctx, `SELECT metadata::text FROM audit_events WHERE id = $1`, ids[0]).Scan(&meta); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(meta, []byte("pathTokenAAAA")) {
		t.Errorf("the event was changed in the log: %s", meta)
	}
}

// A delivery of a webhook.* event that an instance of before the URL
// redaction stored after migration 0016 ran (a rolling upgrade: its
// dispatcher built the body from the event as recorded) is redacted when it
// is claimed: the attempt sends, and the delivery keeps, the body with url
// redacted and urlSha256 beside it. A redacted body is sent byte for byte.
func TestClaimRedactsAnOldInstancesDeliveryBody(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	ep := f.endpoint(t, "webhook.*")
	deliver := func(metadata map[string]any) (string, []byte) {
		t.Helper()
		id := uuid.NewString()
		body, _ := json.Marshal(store.WebhookPayload{Version: store.WebhookPayloadVersion, Type: "webhook.pinged",
			Timestamp: time.Now().UTC(), Data: store.WebhookEventData{EventID: uuid.NewString(), WorkspaceID: &f.workspace,
				Action: "webhook.pinged", EntityType: "webhook", EntityID: ep, OccurredAt: time.Now().UTC(), Metadata: metadata}})
		if _, err := f.db.Pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, action, payload, next_attempt_at)
			VALUES ($1, $2, $3, $4, 'webhook.pinged', $5, now())`, id, ep, f.workspace, uuid.NewString(), body); err != nil {
			t.Fatal(err)
		}
		return id, body
	}
	old, _ := deliver(map[string]any{"url": tokenURL})
	a, err := f.db.ClaimWebhookAttempt(ctx, old, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	if err := f.db.Pool.QueryRow(ctx, `SELECT payload FROM webhook_deliveries WHERE id = $1`, old).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	for what, body := range map[string][]byte{"sent": a.Payload, "stored": stored} {
		var got struct {
			Data struct{ Metadata map[string]any } `json:"data"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if want := map[string]any{"url": tokenURLShown, "urlSha256": sha256Hex(tokenURL)}; !reflect.DeepEqual(got.Data.Metadata, want) {
			t.Errorf("%s body of an old instance's delivery: metadata %v, want %v", what, got.Data.Metadata, want)
		}
	}
	redacted, body := deliver(map[string]any{"url": tokenURLShown, "urlSha256": sha256Hex(tokenURL)})
	if a, err := f.db.ClaimWebhookAttempt(ctx, redacted, time.Minute); err != nil || !bytes.Equal(a.Payload, body) {
		t.Errorf("a redacted body: sent %s (%v), want byte for byte %s", a.Payload, err, body)
	}
}
