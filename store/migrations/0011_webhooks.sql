-- Webhooks: endpoints a workspace's OWNERs and ADMINs register, and one
-- delivery per committed audit event that matches an endpoint. The dispatcher
-- (store/webhook_dispatch.go) reads the event spine past its cursor and, in
-- the transaction that moves the cursor, inserts the deliveries and their
-- River jobs; River's own tables come from rivermigrate (store/migrate.go).

CREATE TABLE webhook_endpoints (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    url             text NOT NULL,
    description     text,
    -- Exact actions or prefixes ending in "*"; empty: every action.
    actions         text[] NOT NULL DEFAULT '{}',
    enabled         boolean NOT NULL DEFAULT true,
    -- The signing secret (32 random bytes), readable by the server, which
    -- must sign with it; never returned after creation, never logged.
    secret          bytea NOT NULL,
    -- The secret before the last rotation, signing too until previous_until.
    previous_secret bytea,
    previous_until  timestamptz,
    -- The creating transaction: events of transactions before it are not the
    -- endpoint's (spine order, see the dispatcher).
    created_tx      xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_by      uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Why the endpoint is disabled (by an admin, or by the server after it
    -- failed for days), and since when.
    disabled_reason text,
    disabled_at     timestamptz,
    -- The first failed attempt since the last success; NULL while it succeeds.
    failing_since   timestamptz
);
CREATE INDEX webhook_endpoints_workspace_idx ON webhook_endpoints (workspace_id, created_at DESC, id DESC);

CREATE TABLE webhook_deliveries (
    -- The id is the webhook-id header: the same on every attempt.
    id               uuid PRIMARY KEY,
    endpoint_id      uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    workspace_id     uuid NOT NULL,
    event_id         uuid NOT NULL,
    action           text NOT NULL,
    -- The body, exactly as sent on every attempt.
    payload          bytea NOT NULL,
    status           text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED')),
    attempts         int NOT NULL DEFAULT 0,
    last_attempt_at  timestamptz,
    last_status_code int,
    last_latency_ms  double precision,
    last_error       text,
    next_attempt_at  timestamptz,
    -- An attempt in flight holds the delivery until this time: no second
    -- attempt starts before it (see ClaimWebhookAttempt).
    in_flight_until  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- One delivery per event and endpoint: the dispatcher's exactly-once, checked.
    CONSTRAINT webhook_deliveries_event_key UNIQUE (endpoint_id, event_id)
);
-- WebhookEndpoint.deliveries, newest first.
CREATE INDEX webhook_deliveries_page_idx ON webhook_deliveries (endpoint_id, created_at DESC, id DESC);
-- Queue depth and the oldest pending delivery (/metrics).
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (created_at) WHERE status = 'PENDING';

-- The dispatcher's cursor in the event spine. It starts at this migration's
-- transaction: no endpoint existed before it. The dispatching transaction
-- locks this one row (FOR UPDATE SKIP LOCKED), as the sealer does its own.
CREATE TABLE webhook_dispatch_cursor (
    id       int PRIMARY KEY CHECK (id = 1),
    tx_id    xid8 NOT NULL,
    seq      bigint NOT NULL,
    moved_at timestamptz NOT NULL
);
INSERT INTO webhook_dispatch_cursor (id, tx_id, seq, moved_at) VALUES (1, pg_current_xact_id(), 0, now());
