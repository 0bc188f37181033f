-- Audit log hardening: no UPDATE/DELETE/TRUNCATE grant on the audit table, and
-- the anchors that keep the hash chains verifiable after retention drops old
-- partitions.

-- Privileges are checked on the table a statement names: the parent for
-- statements through audit_events, the partition for statements naming one.
-- Monthly partitions made later get the same REVOKE when they are created
-- (store/audit_partitions.go).
--
-- REVOKE ... FROM CURRENT_USER also removes the grants the owner holds on its own
-- table (the role running migrations is normally the server's role and the
-- owner). An owner could GRANT them back to itself and a superuser bypasses
-- privileges: for them the append-only triggers of 0002 still make UPDATE,
-- DELETE and TRUNCATE fail. Retention detaches and drops whole partitions, which
-- is DDL that needs ownership, not these privileges, and fires no row trigger.
REVOKE UPDATE, DELETE, TRUNCATE ON audit_events, audit_events_default FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE ON audit_events, audit_events_default FROM CURRENT_USER;

-- audit_chain_anchors holds, for each chain that lost events to retention, the
-- hash and number of the events dropped: verification starts from there.
CREATE TABLE audit_chain_anchors (
    chain_key  text PRIMARY KEY,
    hash       bytea NOT NULL,
    event_id   uuid NOT NULL,
    event_at   timestamptz NOT NULL,
    events     bigint NOT NULL
);

-- Filtering by actor (who did what) without scanning the workspace's history.
CREATE INDEX audit_ws_actor_idx ON audit_events (workspace_id, actor_id, occurred_at DESC, id DESC);
