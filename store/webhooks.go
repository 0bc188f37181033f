package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// MaxWebhookEndpoints is the most endpoints a workspace may have: each
// matching event becomes one delivery per endpoint, so this bounds the work
// one mutation can cause.
const MaxWebhookEndpoints = 20

// WebhookSecretOverlap is how long the secret before a rotation keeps
// signing deliveries, next to the new one.
const WebhookSecretOverlap = 24 * time.Hour

// webhookSecretPrefix starts every signing secret, as Standard Webhooks
// libraries expect.
const webhookSecretPrefix = "whsec_"

// WebhookEndpoint is a URL that receives a workspace's events. Its secret is
// not part of it: the server keeps it and shows it only when it is made
// (WebhookEndpointSecret). Audit events record its URL as
// scheme://host[:port]/… and its SHA-256 (audit.OptionURL), never its path
// or query, which may hold a credential (a Slack webhook's token is its path).
type WebhookEndpoint struct {
	ID          string  `json:"id" audit:"track"`
	WorkspaceID string  `json:"workspaceId" audit:"track"`
	URL         string  `json:"url" audit:"track,url"`
	Description *string `json:"description" audit:"track"`
	// Actions are exact actions or prefixes ending in "*"; empty: every
	// action.
	Actions []string `json:"actions" audit:"track"`
	Enabled bool     `json:"enabled" audit:"track"`
	// DisabledReason says why a disabled endpoint is disabled.
	DisabledReason *string    `json:"disabledReason" audit:"track"`
	DisabledAt     *time.Time `json:"disabledAt" audit:"ignore"`
	// FailingSince is the first failed attempt since the last success.
	FailingSince *time.Time `json:"failingSince" audit:"ignore"`
	// PreviousSecretUntil is when the secret before the last rotation stops
	// signing (nil: there is none).
	PreviousSecretUntil *time.Time `json:"previousSecretUntil" audit:"ignore"`
	CreatedByID         *string    `json:"createdById" audit:"track"`
	CreatedAt           time.Time  `json:"createdAt" audit:"ignore"`
	UpdatedAt           time.Time  `json:"updatedAt" audit:"ignore"`
}

// WebhookEndpointSecret is an endpoint with its signing secret, the answer
// of the operations that make a secret (create, rotate): the only time the
// secret is shown.
type WebhookEndpointSecret struct {
	Endpoint *WebhookEndpoint `json:"endpoint"`
	// Secret is "whsec_" and the standard base64 of 32 random bytes.
	Secret string `json:"secret"`
}

// webhookEndpointColumns is the column list scanned by scanWebhookEndpoint.
const webhookEndpointColumns = `e.id, e.workspace_id, e.url, e.description, e.actions, e.enabled, e.disabled_reason,
	e.disabled_at, e.failing_since, CASE WHEN e.previous_until > now() THEN e.previous_until END, e.created_by,
	e.created_at, e.updated_at`

// scanWebhookEndpoint scans the columns of webhookEndpointColumns, then extra.
func scanWebhookEndpoint(row pgx.Row, extra ...any) (*WebhookEndpoint, error) {
	var e WebhookEndpoint
	dest := append([]any{&e.ID, &e.WorkspaceID, &e.URL, &e.Description, &e.Actions, &e.Enabled, &e.DisabledReason,
		&e.DisabledAt, &e.FailingSince, &e.PreviousSecretUntil, &e.CreatedByID, &e.CreatedAt, &e.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if e.Actions == nil {
		e.Actions = []string{}
	}
	return &e, nil
}

// newWebhookSecret returns a new signing secret: its text and its key.
func newWebhookSecret() (string, []byte) {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return webhookSecretPrefix + base64.StdEncoding.EncodeToString(key), key
}

// cleanWebhookActions normalizes an endpoint's action patterns as
// auditEvents' filter.actions: at most MaxAuditFilterActions exact actions or
// prefixes ending in "*"; "*" alone (or none) is every action.
func cleanWebhookActions(actions []string) ([]string, error) {
	f, err := AuditFilter{Actions: actions}.normalized()
	if err != nil {
		return nil, errs.Errorf(errs.CodeBadUserInput, "actions%s", strings.TrimPrefix(err.Error(), "filter.actions"))
	}
	if f.Actions == nil {
		return []string{}, nil
	}
	return f.Actions, nil
}

// matchAction reports whether action matches one of the patterns (an empty
// list matches every action).
func matchAction(patterns []string, action string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(action, prefix) || p == action {
			return true
		}
	}
	return false
}

// WebhookEndpointInput is a new endpoint.
type WebhookEndpointInput struct {
	WorkspaceID string
	URL         string
	Description *string
	// Actions are exact actions or prefixes ending in "*" (empty or "*":
	// every action).
	Actions []string
}

// webhookAdminAction names managing webhooks in FORBIDDEN errors.
const webhookAdminAction = "manage webhooks (OWNER or ADMIN only)"

// webhookReadAction is the action named by FORBIDDEN for a MEMBER or VIEWER
// who reads webhook endpoints or deliveries.
const webhookReadAction = "see webhooks (OWNER or ADMIN only)"

// CreateWebhookEndpoint registers an endpoint in the workspace, enabled, with
// a new signing secret, and records webhook.created (metadata: the endpoint,
// its URL redacted, never the secret). The endpoint receives the events
// committed after it. The actor must be an OWNER or ADMIN. It returns
// UNAUTHENTICATED for no actor,
// NOT_FOUND if the actor is not a member of the workspace, FORBIDDEN for a
// weaker role, BAD_USER_INPUT for a URL db.Egress refuses (egress.CheckURL),
// an over-long description or bad action patterns, and CONFLICT when the
// workspace has MaxWebhookEndpoints endpoints.
func (db *DB) CreateWebhookEndpoint(ctx context.Context, actor *User, in WebhookEndpointInput) (*WebhookEndpointSecret, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	actions, err := cleanWebhookActions(in.Actions)
	if err != nil {
		return nil, err
	}
	desc, err := cleanDescription(in.Description)
	if err != nil {
		return nil, err
	}
	// The role first: a non-member learns nothing, not even whether a URL
	// resolves. The URL's DNS lookup runs outside the transaction.
	if _, err := db.requireRole(ctx, in.WorkspaceID, actor, RoleAdmin, "workspace", webhookAdminAction); err != nil {
		return nil, err
	}
	u, err := db.Egress.CheckURL(ctx, in.URL)
	if err != nil {
		return nil, err
	}
	secret, key := newWebhookSecret()
	now := stamp(time.Now())
	e := &WebhookEndpoint{ID: newID(), WorkspaceID: mustCanonical(in.WorkspaceID), URL: u, Description: desc, Actions: actions,
		Enabled: true, CreatedByID: &actor.ID, CreatedAt: now, UpdatedAt: now}
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		// One round trip with the commit: the workspace locked (the role
		// checked again under the lock), then, in a statement whose snapshot
		// follows the lock (memberChange says why), the bound on endpoints;
		// the endpoint and its event.
		u := unitOfWorkFrom(ctx)
		u.checkParent(parentWorkspace.locked("FOR NO KEY UPDATE"), e.WorkspaceID, actor, RoleAdmin, webhookAdminAction, "", nil)
		u.check(`SELECT taskflow_check(CASE WHEN (SELECT count(*) FROM webhook_endpoints WHERE workspace_id = $1) >= $2::int
			THEN 'too_many' END)`, []any{e.WorkspaceID, MaxWebhookEndpoints}, refusals{"too_many": errs.Errorf(errs.CodeConflict,
			"the workspace has %d webhook endpoints, the most it may have: delete one first", MaxWebhookEndpoints)})
		if err := db.exec(ctx, tx, "create webhook endpoint", `INSERT INTO webhook_endpoints
				(id, workspace_id, url, description, actions, secret, created_by, created_at, updated_at)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $8 WHERE taskflow_ok()`,
			[]any{e.ID, e.WorkspaceID, e.URL, e.Description, e.Actions, key, actor.ID, now}, 1); err != nil {
			return err
		}
		return db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &e.WorkspaceID, ActorID: &actor.ID,
			Action: "webhook.created", EntityID: e.ID, Metadata: audit.Snapshot(e)})
	})
	if err != nil {
		return nil, err
	}
	return &WebhookEndpointSecret{Endpoint: e, Secret: secret}, nil
}

// lockWebhookEndpoint returns the endpoint locked for the rest of tx, after
// checking that actor is an OWNER or ADMIN of its workspace. It returns
// NOT_FOUND if the endpoint does not exist or the actor is not a member of
// its workspace, and FORBIDDEN for a weaker role.
func lockWebhookEndpoint(ctx context.Context, tx Querier, actor *User, id string) (*WebhookEndpoint, error) {
	e, _, err := lockRow(ctx, tx, webhookEndpointsTable, actor, id, RoleAdmin, webhookAdminAction)
	return e, err
}

// webhookEndpointsTable is the webhook_endpoints table for the write helpers.
var webhookEndpointsTable = table[WebhookEndpoint]{kind: "webhook endpoint", name: "webhook_endpoints", alias: "e",
	columns: webhookEndpointColumns, lock: "FOR NO KEY UPDATE", scan: scanWebhookEndpoint,
	event:  func(e *WebhookEndpoint) (string, string) { return e.WorkspaceID, e.ID },
	withID: func(id string) *WebhookEndpoint { return &WebhookEndpoint{ID: id} },
	json: webhookFieldsSQL + ` || jsonb_build_object('url', d.url, 'disabledAt', ` + rfc3339SQL("d.disabled_at") +
		`, 'failingSince', ` + rfc3339SQL("d.failing_since") + `, 'previousSecretUntil', ` +
		rfc3339SQL("CASE WHEN d.previous_until > now() THEN d.previous_until END") + `) || ` + timesSQL}

// WebhookEndpointPatch is a change to an endpoint: nil fields stay as they are.
type WebhookEndpointPatch struct {
	URL *string
	// Description is the new description when SetDescription; nil clears it.
	Description    *string
	SetDescription bool
	// Actions, when not nil, replaces the action patterns.
	Actions []string
}

// changeWebhookEndpoint changes the endpoint id as actor (an OWNER or ADMIN)
// with sets, and records action, in one round trip with the commit
// (updateRecorded). It returns UNAUTHENTICATED for no actor, and NOT_FOUND if
// the endpoint does not exist, its id is malformed or it is in a workspace
// the actor is not a member of, FORBIDDEN for a weaker role.
func (db *DB) changeWebhookEndpoint(ctx context.Context, actor *User, id, action string, sets []assign) (*WebhookEndpoint, error) {
	return updateRecorded(ctx, db, webhookEndpointsTable, actor, id, RoleAdmin, webhookAdminAction, action, sets, "", nil)
}

// UpdateWebhookEndpoint applies patch to an endpoint and records
// webhook.updated with metadata.changes; a patch that changes nothing
// records nothing. The actor must be an OWNER or ADMIN. It returns
// UNAUTHENTICATED for no actor, NOT_FOUND if the endpoint does not exist or
// is in a workspace the actor is not a member of, FORBIDDEN for a weaker
// role, and BAD_USER_INPUT for a URL db.Egress refuses, an over-long
// description or bad action patterns.
func (db *DB) UpdateWebhookEndpoint(ctx context.Context, actor *User, id string, patch WebhookEndpointPatch) (*WebhookEndpoint, error) {
	var err error
	var actions []string
	if patch.Actions != nil {
		if actions, err = cleanWebhookActions(patch.Actions); err != nil {
			return nil, err
		}
	}
	var desc *string
	if patch.SetDescription {
		if desc, err = cleanDescription(patch.Description); err != nil {
			return nil, err
		}
	}
	var u *string
	if patch.URL != nil {
		// The role first, as CreateWebhookEndpoint does: a caller who may
		// not change the endpoint learns nothing of the URL and gets no DNS
		// lookup of it. The lookup runs before the endpoint is locked (it
		// holds no lock); the lock checks the role again.
		if _, err := db.WebhookEndpoint(ctx, actor, id); err != nil {
			return nil, err
		}
		checked, err := db.Egress.CheckURL(ctx, *patch.URL)
		if err != nil {
			return nil, err
		}
		u = &checked
	}
	var sets []assign
	if u != nil {
		sets = append(sets, setTo("url", "url", "text", *u))
	}
	if patch.SetDescription {
		sets = append(sets, setTo("description", "description", "text", desc))
	}
	if actions != nil {
		sets = append(sets, setTo("actions", "actions", "text[]", actions))
	}
	return db.changeWebhookEndpoint(ctx, actor, id, "webhook.updated", sets)
}

// MaxDisabledReasonLength bounds the reason given when disabling an endpoint.
const MaxDisabledReasonLength = 500

// SetWebhookEndpointEnabled enables or disables an endpoint and records
// webhook.enabled or webhook.disabled; reason (disabling only; nil: "disabled
// by an admin") is shown as disabledReason. Enabling clears the reason and
// the failure streak. Deliveries are made only for events the dispatcher
// reaches while the endpoint is enabled; the attempts of a disabled
// endpoint's pending deliveries end FAILED. Setting the state it has changes
// and records nothing. The actor must be an OWNER or ADMIN. It returns
// UNAUTHENTICATED for no actor, NOT_FOUND if the endpoint does not exist or
// is in a workspace the actor is not a member of, FORBIDDEN for a weaker
// role, and BAD_USER_INPUT for an over-long reason.
func (db *DB) SetWebhookEndpointEnabled(ctx context.Context, actor *User, id string, enabled bool, reason *string) (*WebhookEndpoint, error) {
	why := "disabled by an admin"
	if reason != nil && strings.TrimSpace(*reason) != "" {
		why = strings.TrimSpace(*reason)
		if len([]rune(why)) > MaxDisabledReasonLength {
			return nil, errs.Errorf(errs.CodeBadUserInput, "reason must be at most %d characters", MaxDisabledReasonLength)
		}
	}
	action := "webhook.disabled"
	if enabled {
		action = "webhook.enabled"
	}
	// Setting the state an endpoint has changes nothing: not its reason (a
	// recorded column: its value is the one it has then), nor, since the
	// ignored columns change only with the recorded ones, its disabledAt or
	// failure streak.
	sets := []assign{setTo("enabled", "enabled", "boolean", enabled)}
	if enabled {
		sets = append(sets, assign{column: "disabled_reason", field: "disabledReason",
			value: "CASE WHEN b.enabled THEN b.disabled_reason END"},
			assign{column: "disabled_at", value: "NULL"}, assign{column: "failing_since", value: "NULL"})
	} else {
		sets = append(sets, assign{column: "disabled_reason", field: "disabledReason",
			value: "CASE WHEN b.enabled THEN %s::text ELSE b.disabled_reason END", arg: why},
			assign{column: "disabled_at", value: "$2"})
	}
	if enabled {
		return db.changeWebhookEndpoint(ctx, actor, id, action, sets)
	}
	var out *WebhookEndpoint
	err := db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		e, err := db.changeWebhookEndpoint(ctx, actor, id, action, sets)
		if err != nil {
			return err
		}
		out = e
		// Its PENDING deliveries end FAILED now, not at their next attempt
		// (hours away, maybe; enabling the endpoint before then would
		// resume them): after the endpoint's update, in its transaction.
		unitOfWorkFrom(ctx).write("fail deliveries of a disabled webhook endpoint", failDisabledDeliveriesSQL,
			[]any{e.ID}, -1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// failDisabledDeliveriesSQL marks FAILED ("the endpoint is disabled") the
// PENDING deliveries of the endpoint $1 when it is disabled, but its pings
// (delivered to a disabled endpoint too) and those an attempt holds or that
// another transaction has locked (a redelivery, a claim): the claim of their
// next attempt fails them (unclaimable), so that this statement waits for
// no lock, which would risk a deadlock with the statements that lock a
// delivery, then its endpoint.
const failDisabledDeliveriesSQL = `UPDATE webhook_deliveries d SET status = 'FAILED', next_attempt_at = NULL,
	last_error = 'the endpoint is disabled'
	WHERE d.id IN (SELECT p.id FROM webhook_deliveries p JOIN webhook_endpoints e ON e.id = p.endpoint_id
		WHERE p.endpoint_id = $1 AND NOT e.enabled AND p.status = 'PENDING' AND p.action <> 'webhook.pinged'
		AND (p.in_flight_until IS NULL OR p.in_flight_until <= now()) AND taskflow_ok()
		FOR NO KEY UPDATE OF p SKIP LOCKED)`

// RotateWebhookSecret gives an endpoint a new signing secret and returns it
// (the only time it is shown); the secret it replaces keeps signing, next to
// the new one, for WebhookSecretOverlap (a secret older than that is
// dropped). It records webhook.secret_rotated, without either secret. The
// actor must be an OWNER or ADMIN. It returns UNAUTHENTICATED for no actor,
// NOT_FOUND if the endpoint does not exist or is in a workspace the actor is
// not a member of, and FORBIDDEN for a weaker role.
func (db *DB) RotateWebhookSecret(ctx context.Context, actor *User, id string) (*WebhookEndpointSecret, error) {
	secret, key := newWebhookSecret()
	var out *WebhookEndpointSecret
	err := db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		e, err := db.changeWebhookEndpoint(ctx, actor, id, "webhook.secret_rotated", []assign{
			{column: "previous_secret", value: "b.secret"},
			{column: "previous_until", value: "$2::timestamptz + %s::bigint * interval '1 second'",
				arg: int64(WebhookSecretOverlap / time.Second)},
			{column: "secret", value: "%s::bytea", arg: key}})
		if err != nil {
			return err
		}
		out = &WebhookEndpointSecret{Endpoint: e, Secret: secret}
		// Its idempotency record, made by Postgres as the endpoint's is.
		unitOfWorkFrom(ctx).made(out, `jsonb_build_object('endpoint', (SELECT `+webhookEndpointsTable.json+`
			FROM webhook_endpoints d WHERE d.id = ($5::text[])[1]::uuid), 'secret', ($5::text[])[2])`, []string{e.ID, secret})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteWebhookEndpoint deletes an endpoint with its deliveries (attempts in
// flight finish; none starts after) and records webhook.deleted with its
// snapshot, in one round trip with the commit. The actor must be an OWNER or
// ADMIN. It returns UNAUTHENTICATED for no actor, NOT_FOUND if the endpoint does not exist or is in a workspace
// the actor is not a member of, and FORBIDDEN for a weaker role.
func (db *DB) DeleteWebhookEndpoint(ctx context.Context, actor *User, id string) error {
	return deleteRecorded(ctx, db, webhookEndpointsTable, actor, id, RoleAdmin, webhookAdminAction, "webhook.deleted",
		webhookSnapshotSQL, "", nil)
}

// webhookFieldsSQL is the tracked fields of a webhook_endpoints row d but its
// URL, as JSON.
const webhookFieldsSQL = `jsonb_build_object('id', d.id, 'workspaceId', d.workspace_id,
	'description', d.description, 'actions', d.actions, 'enabled', d.enabled, 'disabledReason', d.disabled_reason,
	'createdById', d.created_by)`

// webhookURLSQL is what audit events record of the URL of a webhook_endpoints
// row d: audit.RedactURL and audit.URLSha256 of it (audit.OptionURL), as JSON.
var webhookURLSQL = `jsonb_build_object('url', ` + audit.RedactURLSQL("d.url") + `, 'urlSha256', ` +
	audit.URLSha256SQL("d.url") + `)`

// webhookSnapshotSQL is audit.Snapshot of a WebhookEndpoint as Postgres makes
// it from a webhook_endpoints row d (TestSnapshotsInSQLAreGos compares them):
// its URL redacted.
var webhookSnapshotSQL = webhookFieldsSQL + ` || ` + webhookURLSQL

// PingWebhookEndpoint records webhook.pinged about the endpoint (metadata:
// its url, redacted, and urlSha256, as webhook.created's), an event
// the dispatcher delivers to that endpoint alone, whatever its actions and
// even while it is disabled: a test delivery. The actor must be an OWNER or
// ADMIN. It returns UNAUTHENTICATED for no actor, NOT_FOUND if the endpoint
// does not exist or is in a workspace the actor is not a member of, and
// FORBIDDEN for a weaker role.
func (db *DB) PingWebhookEndpoint(ctx context.Context, actor *User, id string) error {
	if actor == nil {
		return errs.ErrUnauthenticated
	}
	canon, err := canonicalID(id)
	if err != nil {
		return notFound(webhookEndpointsTable.kind)
	}
	return db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		rec, err := db.recordNow(ctx, actor, "webhook.pinged")
		if err != nil {
			return err
		}
		u.checkParent(webhookEndpointsTable.parent(webhookEndpointsTable.lock), canon, actor, RoleAdmin, webhookAdminAction, "", nil)
		event, params := recordedFrom(&rec, "webhook_endpoints d WHERE d.id = $1 AND taskflow_ok()", "d.workspace_id", "d.id",
			webhookURLSQL, []any{canon})
		u.write("ping webhook endpoint", event, params, 1)
		return nil
	})
}

// WebhookEndpoint returns the endpoint with this id as viewer may see it:
// NOT_FOUND if it does not exist or viewer is not a member of its workspace,
// FORBIDDEN for a MEMBER or VIEWER, UNAUTHENTICATED for no viewer.
func (db *DB) WebhookEndpoint(ctx context.Context, viewer *User, id string) (*WebhookEndpoint, error) {
	if viewer == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !validID(id) {
		return nil, notFound("webhook endpoint")
	}
	var role *Role
	e, err := scanWebhookEndpoint(db.q(ctx).QueryRow(ctx, `SELECT `+webhookEndpointColumns+`, m.role FROM webhook_endpoints e`+
		joinRole("e", "$2")+` WHERE e.id = $1`, id, viewer.ID), &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("webhook endpoint")
	}
	if err != nil {
		return nil, fmt.Errorf("webhook endpoint: %w", err)
	}
	if _, err := checkRole(role, RoleAdmin, "webhook endpoint", webhookReadAction); err != nil {
		return nil, err
	}
	return e, nil
}

// WebhookEndpoints returns the workspace's endpoints (at most
// MaxWebhookEndpoints), newest first. It returns UNAUTHENTICATED for no
// viewer, NOT_FOUND if viewer is not a member of the workspace, and FORBIDDEN
// for a MEMBER or VIEWER.
func (db *DB) WebhookEndpoints(ctx context.Context, viewer *User, workspaceID string) ([]*WebhookEndpoint, error) {
	if _, err := db.requireRole(ctx, workspaceID, viewer, RoleAdmin, "workspace", webhookReadAction); err != nil {
		return nil, err
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+webhookEndpointColumns+` FROM webhook_endpoints e
		WHERE e.workspace_id = $1 ORDER BY e.created_at DESC, e.id DESC`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("webhook endpoints: %w", err)
	}
	defer rows.Close()
	out := []*WebhookEndpoint{}
	for rows.Next() {
		e, err := scanWebhookEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("webhook endpoints: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
