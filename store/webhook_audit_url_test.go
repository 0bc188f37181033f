package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// Token-bearing webhook URLs, as Slack-style integrations have them: a
// credential in the path and another in the query.
const (
	tokenURL      = "https://203.0.113.10/services/T000/B000/pathTokenAAAA?token=queryTokenBBBB&x=1"
	tokenURL2     = "https://203.0.113.11:8443/services/T111/B111/pathTokenCCCC?sig=queryTokenDDDD"
	tokenURLShown = "https://203.0.113.10/…"
	tokenURLShow2 = "https://203.0.113.11:8443/…"
)

// urlTokens are the credentials of tokenURL and tokenURL2.
var urlTokens = []string{"pathTokenAAAA", "queryTokenBBBB", "pathTokenCCCC", "queryTokenDDDD", "services", "T000", "T111"}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// An endpoint URL's path and query never reach the audit log: not in
// webhook.created's snapshot, webhook.updated's changes of the URL,
// webhook.pinged, webhook.disabled, webhook.enabled nor webhook.deleted.
// Each records the URL as scheme://host[:port]/… and its SHA-256, so an
// admin holding a URL can find its events; the endpoint itself, as admins
// read it, keeps its full URL.
func TestWebhookAuditNeverRecordsTheURLsPathOrQuery(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	created, err := f.db.CreateWebhookEndpoint(ctx, f.owner, store.WebhookEndpointInput{WorkspaceID: f.workspace, URL: tokenURL})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Endpoint.ID
	if created.Endpoint.URL != tokenURL {
		t.Errorf("created with URL %q, want %q", created.Endpoint.URL, tokenURL)
	}
	if err := f.db.PingWebhookEndpoint(ctx, f.owner, id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.UpdateWebhookEndpoint(ctx, f.owner, id, store.WebhookEndpointPatch{URL: ptr(tokenURL2)}); err != nil {
		t.Fatal(err)
	}
	read, err := f.db.WebhookEndpoint(ctx, f.owner, id)
	if err != nil || read.URL != tokenURL2 {
		t.Fatalf("the endpoint as admins read it: %+v (%v), want its full URL %q", read, err, tokenURL2)
	}
	if _, err := f.db.UpdateWebhookEndpoint(ctx, f.owner, id, store.WebhookEndpointPatch{URL: ptr(tokenURL2 + "&v=2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.UpdateWebhookEndpoint(ctx, f.owner, id, store.WebhookEndpointPatch{URL: ptr(tokenURL2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.SetWebhookEndpointEnabled(ctx, f.owner, id, false, ptr("maintenance")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.SetWebhookEndpointEnabled(ctx, f.owner, id, true, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.db.PingWebhookEndpoint(ctx, f.owner, id); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteWebhookEndpoint(ctx, f.owner, id); err != nil {
		t.Fatal(err)
	}

	rows, err := f.db.Pool.Query(ctx, `SELECT action, metadata::text FROM audit_events
		WHERE workspace_id = $1 AND entity_id = $2 ORDER BY occurred_at, id`, f.workspace, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	events := map[string][]string{}
	for rows.Next() {
		var action, meta string
		if err := rows.Scan(&action, &meta); err != nil {
			t.Fatal(err)
		}
		events[action] = append(events[action], meta)
		for _, token := range urlTokens {
			if strings.Contains(meta, token) {
				t.Errorf("%s records %q of the URL: %s", action, token, meta)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	has := func(action string, i int, parts ...string) {
		t.Helper()
		if len(events[action]) <= i {
			t.Errorf("%s: %d events, want at least %d", action, len(events[action]), i+1)
			return
		}
		for _, p := range parts {
			if !strings.Contains(events[action][i], p) {
				t.Errorf("%s #%d: %s, want it to hold %s", action, i+1, events[action][i], p)
			}
		}
	}
	h1, h2, h3 := sha256Hex(tokenURL), sha256Hex(tokenURL2), sha256Hex(tokenURL2+"&v=2")
	has("webhook.created", 0, `"url": "`+tokenURLShown+`"`, `"urlSha256": "`+h1+`"`)
	has("webhook.pinged", 0, `"url": "`+tokenURLShown+`"`, `"urlSha256": "`+h1+`"`)
	has("webhook.updated", 0, `"url": {"to": "`+tokenURLShow2+`", "from": "`+tokenURLShown+`"}`,
		`"urlSha256": {"to": "`+h2+`", "from": "`+h1+`"}`)
	// Only the query changed: the URL shown is the same, its hash is not.
	has("webhook.updated", 1, `"url": {"to": "`+tokenURLShow2+`", "from": "`+tokenURLShow2+`"}`,
		`"urlSha256": {"to": "`+h3+`", "from": "`+h2+`"}`)
	has("webhook.updated", 2, `"urlSha256": {"to": "`+h2+`", "from": "`+h3+`"}`)
	has("webhook.disabled", 0, `"enabled"`)
	has("webhook.enabled", 0, `"enabled"`)
	has("webhook.pinged", 1, `"url": "`+tokenURLShow2+`"`, `"urlSha256": "`+h2+`"`)
	has("webhook.deleted", 0, `"url": "`+tokenURLShow2+`"`, `"urlSha256": "`+h2+`"`, `"id": "`+id+`"`)
}

// trickyURLs are URLs the server accepts and text it never would, for the
// comparisons of redactions in SQL with audit.RedactURL.
var trickyURLs = []string{tokenURL, tokenURL2, "", "…", "https://h", "https://h/", "https://h?x=1", "https://h#f",
	"https://u:p@h:1/x", "https://a@b@c/x@y?z@w", "HTTPS://H.Example:443/p", "a:b://x", "//x/y", "ftp://",
	"https://ü.example/é?q=ü", "https://h/\n", "https://h\n@evil/x", "https://[2001:db8::1]:8443/x", "http://h:8080?q",
	"https://h@", "://x", "https://x://y/z", "mailto:a@b.example", "https://h\\@x/y", "https://h%2F@x/y", "https://h/a&b<c>"}

// Postgres redacts and hashes a URL as package audit does (the snapshots and
// diffs it makes in SQL, audit.RedactURLSQL and audit.URLSha256SQL), for
// URLs the server accepts and for text it never would.
func TestRedactURLInSQLIsGos(t *testing.T) {
	t.Parallel()
	pool := storetest.DB(t).Pool
	for _, u := range trickyURLs {
		var shown, sum string
		if err := pool.QueryRow(t.Context(), `SELECT `+audit.RedactURLSQL("$1::text")+`, `+audit.URLSha256SQL("$1::text"), u).
			Scan(&shown, &sum); err != nil {
			t.Fatal(err)
		}
		if shown != audit.RedactURL(u) || sum != audit.URLSha256(u) || sum != sha256Hex(u) {
			t.Errorf("%q: SQL %q %s, Go %q %s", u, shown, sum, audit.RedactURL(u), audit.URLSha256(u))
		}
	}
	var shown, sum *string
	if err := pool.QueryRow(t.Context(), `SELECT `+audit.RedactURLSQL("NULL::text")+`, `+audit.URLSha256SQL("NULL::text")).
		Scan(&shown, &sum); err != nil || shown != nil || sum != nil {
		t.Errorf("NULL: %v %v (%v)", shown, sum, err)
	}
}
