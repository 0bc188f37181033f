-- The end of an audit export (SUCCEEDED or FAILED) is fenced by the
-- database, not only by the WHERE of the server's statements (lease = the
-- run's, migration 0019). A server of a release before 2026-12-05 knows no
-- run nor lease: its job finishes and fails an export by its id alone
-- (WHERE id = $1 AND state = 'RUNNING'), so during a rolling upgrade its run,
-- taken over while it still wrote, marked SUCCEEDED the export the new run
-- held, naming the new run's object before it existed (and the new run,
-- its finish refused, then deleted that object).
--
-- ended_lease is the lease an end is made under: a statement that moves an
-- export from QUEUED or RUNNING to SUCCEEDED or FAILED sets it to the lease
-- it holds (store.FinishAuditExport, FailAuditExport; the takeover pass and
-- the expiry, which end exports whatever their run, to the row's lease), and
-- the trigger skips the row (the statement updates 0 rows, with a WARNING)
-- unless it is the row's current lease. An old server never sets it, so:
--
-- A begin that does not move the lease (an old server's: it sets state
-- RUNNING and started_at, not lease) is made one: the trigger bumps the
-- lease, so that the run it replaces (of a new server or an old one) stamps
-- and ends nothing more, and sets ended_lease to the new lease, so that the
-- old run, which will not name it, may end the export while it holds it,
-- and not once another run began it or the takeover took it (both move the
-- lease). Its heartbeat is cleared: an old run stamps none, so the takeover
-- pass, which would take every old run of more than
-- AUDIT_EXPORT_TAKEOVER_AFTER for a dead one, leaves it to River's timeout
-- as before the upgrade. Two old runs of one export are not told apart (as
-- before the upgrade).
--
-- The exports RUNNING now are their current run's to end (ended_lease =
-- lease): an old run that holds one still finishes it, unless it is taken
-- over first (0019 took its start for its heartbeat).
--
-- An operator who ends an export by hand sets ended_lease = lease with the
-- state. The trigger is called only when the state or started_at changes
-- (not for a heartbeat's stamp).
ALTER TABLE audit_exports ADD COLUMN ended_lease bigint;

UPDATE audit_exports SET ended_lease = lease WHERE state = 'RUNNING';

CREATE FUNCTION audit_exports_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'RUNNING' AND NEW.lease = OLD.lease
        AND (OLD.state = 'QUEUED' OR NEW.started_at IS DISTINCT FROM OLD.started_at) THEN
        NEW.lease := OLD.lease + 1;
        NEW.ended_lease := NEW.lease;
        NEW.heartbeat_at := NULL;
        RETURN NEW;
    END IF;
    IF OLD.state IN ('QUEUED', 'RUNNING') AND NEW.state IN ('SUCCEEDED', 'FAILED')
        AND NEW.ended_lease IS DISTINCT FROM OLD.lease THEN
        RAISE WARNING USING MESSAGE = format(
            'audit export %s not marked %s: the statement names lease %s, the export is under lease %s (taken over, or begun by another run since)',
            OLD.id, NEW.state, coalesce(NEW.ended_lease::text, 'none'), OLD.lease),
            HINT = 'to end it by hand, set ended_lease = lease with the state';
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER audit_exports_fence BEFORE UPDATE ON audit_exports
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.started_at IS DISTINCT FROM NEW.started_at)
    EXECUTE FUNCTION audit_exports_fence();
