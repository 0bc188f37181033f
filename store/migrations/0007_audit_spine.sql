-- The audit log as the event spine: a unit of work inserts its events
-- unchained (no lock, no head), and a sealer chains committed events shortly
-- after, in spine order (store/audit_seal.go). Why the spine order skips
-- nothing: docs/decisions/2026-12-01-event-spine.md.
--
-- Upgrading: stop every instance of the previous version first. An old
-- instance still chains events in their row and moves the head itself, which
-- the sealer would chain a second time.

-- Spine order is (tx_id, seq): the id of the transaction that inserted the
-- row, then the order of inserts. Rows written before this migration keep NULL
-- (they were chained in their row and are sealed below), which is why the
-- defaults are set after the columns exist: a volatile default given in ADD
-- COLUMN would be evaluated for every existing row. Both ALTERs and the index
-- reach every partition, and partitions created later (audit_partitions.go)
-- inherit the defaults and the index.
CREATE SEQUENCE audit_events_seq AS bigint;
ALTER TABLE audit_events ADD COLUMN tx_id xid8, ADD COLUMN seq bigint;
ALTER TABLE audit_events ALTER COLUMN tx_id SET DEFAULT pg_current_xact_id(),
    ALTER COLUMN seq SET DEFAULT nextval('audit_events_seq');
-- New events carry no hash: their seal (audit_seals) does.
ALTER TABLE audit_events ALTER COLUMN hash DROP NOT NULL;
CREATE INDEX audit_spine_idx ON audit_events (tx_id, seq);

-- A seal puts one event at a position of its chain: hash is SHA-256 of
-- prev_hash (the seal before it, or the retention anchor; NULL for the first)
-- and the event's canonical encoding (package audit). occurred_at makes the
-- join to audit_events use its primary key.
CREATE TABLE audit_seals (
    chain_key   text NOT NULL,
    position    bigint NOT NULL CHECK (position > 0),
    event_id    uuid NOT NULL UNIQUE,
    occurred_at timestamptz NOT NULL,
    prev_hash   bytea,
    hash        bytea NOT NULL,
    sealed_at   timestamptz NOT NULL,
    PRIMARY KEY (chain_key, position)
);

-- The sealer's cursor: the spine position of the last event sealed. The
-- sealing transaction locks this one row (FOR UPDATE SKIP LOCKED), so one
-- sealer advances at a time with transaction-scoped locks only.
CREATE TABLE audit_seal_cursor (
    id       int PRIMARY KEY CHECK (id = 1),
    tx_id    xid8 NOT NULL,
    seq      bigint NOT NULL,
    moved_at timestamptz NOT NULL
);
INSERT INTO audit_seal_cursor (id, tx_id, seq, moved_at) VALUES (1, '0', 0, now());

-- Signed checkpoints of chain heads (Ed25519; the private key never reaches
-- the database). public_key is kept so that every key that ever signed can be
-- listed; verification trusts only the keys the server is configured with.
CREATE TABLE audit_checkpoints (
    chain_key  text NOT NULL,
    position   bigint NOT NULL,
    head_hash  bytea NOT NULL,
    signed_at  timestamptz NOT NULL,
    key_id     text NOT NULL,
    public_key bytea NOT NULL,
    signature  bytea NOT NULL,
    PRIMARY KEY (chain_key, position, key_id)
);

-- The head now records the seal position (events) and the chain's last
-- checkpoint; the index finds heads whose newest seals no checkpoint covers.
ALTER TABLE audit_chain_heads ADD COLUMN checkpoint_position bigint NOT NULL DEFAULT 0,
    ADD COLUMN checkpoint_at timestamptz;
CREATE INDEX audit_heads_unsigned_idx ON audit_chain_heads (checkpoint_at)
    WHERE checkpoint_position < events;

-- Legacy events: their row's chain becomes their seals, positions counted
-- after the events retention dropped (the anchor's count), so verification
-- walks one table.
INSERT INTO audit_seals (chain_key, position, event_id, occurred_at, prev_hash, hash, sealed_at)
SELECT e.chain_key,
       coalesce(a.events, 0) + row_number() OVER (PARTITION BY e.chain_key ORDER BY e.occurred_at, e.id),
       e.id, e.occurred_at, e.prev_hash, e.hash, now()
FROM audit_events e LEFT JOIN audit_chain_anchors a USING (chain_key)
WHERE e.hash IS NOT NULL;

-- Seals and checkpoints are append-only, like the events (0002, 0004).
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_seals_no_update_delete BEFORE UPDATE OR DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_seals_no_truncate BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_checkpoints_no_update_delete BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_seals, audit_checkpoints FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE ON audit_seals, audit_checkpoints FROM CURRENT_USER;
