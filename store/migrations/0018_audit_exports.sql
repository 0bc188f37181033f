-- Asynchronous audit exports (startAuditExport): one row per export, worked
-- by a River job (store.AuditExportArgs). The file is the blob store's object
-- object_key, which the database names before its first byte is written so
-- that the blob sweeper spares it (UnknownBlobs); it is served only once the
-- row is SUCCEEDED, and forgotten (object_key NULL) when the row expires.
CREATE TABLE audit_exports (
    id             uuid PRIMARY KEY,
    workspace_id   uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    -- The starter: the job reads the log as this user (the access rule is
    -- checked again when it runs).
    created_by     uuid REFERENCES users (id) ON DELETE SET NULL,
    format         text NOT NULL CHECK (format IN ('NDJSON', 'CSV')),
    -- The filter of the sync export (store.AuditFilter, normalized), as JSON.
    filter         jsonb NOT NULL,
    state          text NOT NULL DEFAULT 'QUEUED'
                   CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'EXPIRED')),
    events_written bigint NOT NULL DEFAULT 0,
    bytes          bigint NOT NULL DEFAULT 0,
    object_key     text,
    error          text,
    created_at     timestamptz NOT NULL,
    started_at     timestamptz,
    finished_at    timestamptz,
    expires_at     timestamptz
);

-- A workspace's exports, newest first (the connection, the start bounds).
CREATE INDEX audit_exports_workspace ON audit_exports (workspace_id, created_at DESC, id DESC);
-- The expiry sweep.
CREATE INDEX audit_exports_expiry ON audit_exports (expires_at) WHERE expires_at IS NOT NULL;
-- The blob sweeper's lookups.
CREATE UNIQUE INDEX audit_exports_object_key ON audit_exports (object_key) WHERE object_key IS NOT NULL;
