-- The checks of a unit of work that is sent in one round trip (store/tx.go,
-- store/write.go; docs/decisions/2026-12-01-one-round-trip.md).
--
-- A mutation's statements (its checks, its writes, its audit events, its
-- idempotency record and COMMIT) go to Postgres in one pipeline, so nothing in
-- Go can stand between a check and the writes it guards. Two mechanisms keep
-- "nothing changed" true:
--
-- * taskflow_check(refusal) raises (SQLSTATE TF000, the refusal as message)
--   when a check finds a reason to refuse: the transaction aborts, nothing
--   after it runs, and Postgres skips the COMMIT at the end of the pipeline.
--   Store code maps the message back to its domain error (NOT_FOUND,
--   FORBIDDEN, CONFLICT).
-- * An idempotency claim that does not claim its key (the key has a record,
--   or a running transaction holds it) raises nothing: it sets the
--   transaction-local setting taskflow.refused, and every deferred write is
--   guarded by taskflow_ok(), so the pipeline runs to its COMMIT and commits
--   nothing. (An error would make pgx drop the batch's prepared statements,
--   a re-prepare round trip on the connection's next request: fine for a
--   refusal, not for every replay of a key.)

CREATE FUNCTION taskflow_ok() RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT coalesce(current_setting('taskflow.refused', true), '') = '' $$;

CREATE FUNCTION taskflow_check(refusal text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS
$$
BEGIN
    -- Once a claim refused the unit of work nothing of it applies: a check
    -- need not abort it too (the claim's answer is what the caller acts on).
    IF refusal IS NOT NULL AND taskflow_ok() THEN
        RAISE EXCEPTION USING ERRCODE = 'TF000', MESSAGE = refusal;
    END IF;
    RETURN true;
END
$$;
