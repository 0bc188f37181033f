-- The append-only, hash-chained audit log, range-partitioned by month.

CREATE TABLE audit_events (
    id           uuid NOT NULL,
    -- chain_key names the hash chain the event belongs to: the workspace id, or
    -- 'user:<id>' for account events, or 'anonymous' for failed logins of no user.
    chain_key    text NOT NULL,
    workspace_id uuid,
    actor_id     uuid,
    action       text NOT NULL,
    entity_type  text NOT NULL,
    entity_id    text NOT NULL,
    occurred_at  timestamptz NOT NULL,
    ip           text,
    user_agent   text,
    request_id   text,
    metadata     jsonb NOT NULL DEFAULT '{}',
    prev_hash    bytea,
    hash         bytea NOT NULL,
    PRIMARY KEY (occurred_at, id)
) PARTITION BY RANGE (occurred_at);

CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;

CREATE INDEX audit_ws_time_idx ON audit_events (workspace_id, occurred_at DESC, id DESC);
CREATE INDEX audit_ws_action_idx ON audit_events (workspace_id, action, occurred_at DESC, id DESC);
CREATE INDEX audit_ws_entity_idx ON audit_events (workspace_id, entity_type, entity_id, occurred_at DESC, id DESC);
CREATE INDEX audit_chain_idx ON audit_events (chain_key, occurred_at DESC, id DESC);

-- audit_chain_heads holds the newest hash of each chain; appends lock the row.
CREATE TABLE audit_chain_heads (
    chain_key  text PRIMARY KEY,
    head_hash  bytea NOT NULL,
    event_id   uuid NOT NULL,
    event_at   timestamptz NOT NULL,
    events     bigint NOT NULL
);

CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_events_no_update_delete
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();

CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

CREATE TRIGGER audit_events_default_no_truncate
    BEFORE TRUNCATE ON audit_events_default
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
