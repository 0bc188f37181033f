-- The W3C trace id of the request behind an audit event, when tracing was on:
-- the event can be found from a trace, and the trace from the event. Nullable,
-- without a default: adding it rewrites nothing, and the events written before
-- it (and without tracing) have none. The hash chain covers it only when it is
-- set (audit.Record's traceId is omitted when null), so every earlier event
-- still verifies.
ALTER TABLE audit_events ADD COLUMN trace_id text;
