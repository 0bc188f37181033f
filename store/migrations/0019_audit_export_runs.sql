-- Audit exports whose run died with its instance are taken over in minutes
-- (store.TakeOverAuditExports), not after the job's timeout. run is the
-- River job that owns the export (store.AuditExportArgs.Run): a takeover
-- bumps it and inserts the next job, so that the old job, if River runs it
-- again, finds the export gone. lease is bumped by each run's begin: a run
-- stamps heartbeat_at, finishes and fails the export only while the lease
-- is its own, so a run taken over that was in fact alive stops and writes
-- over nothing.
ALTER TABLE audit_exports
    ADD COLUMN run int NOT NULL DEFAULT 1,
    ADD COLUMN lease bigint NOT NULL DEFAULT 0,
    ADD COLUMN heartbeat_at timestamptz;

-- Runs begun before this migration: their heartbeat is their start.
UPDATE audit_exports SET heartbeat_at = coalesce(started_at, now()) WHERE state = 'RUNNING';

-- The takeover pass, and the metric of exports queued or running.
CREATE INDEX audit_exports_active ON audit_exports (heartbeat_at) WHERE state IN ('QUEUED', 'RUNNING');
