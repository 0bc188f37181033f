-- Webhook deliveries of webhook.* events recorded before 2026-12-04 carry the
-- endpoint URL whole in their stored bodies (data.metadata.url, and
-- data.metadata.changes.url's from and to for webhook.updated), and every
-- retry and redelivery sends the body as stored, to the workspace's other
-- endpoints, for the 30 days a delivery is kept. A URL's path and query may
-- hold a credential (a Slack webhook's token is its path). This rewrites
-- those fields as the audit log records them since then: url as
-- scheme://host[:port]/… (audit.RedactURLSQL), and urlSha256, the SHA-256 of
-- the whole URL (audit.URLSha256SQL), beside it. Bodies that have urlSha256
-- already, and deliveries of other events, are left byte for byte. A
-- rewritten body is re-encoded by jsonb (its keys' order and spacing differ;
-- it is signed at each attempt, as always). TestMigrationRedactsWebhook-
-- DeliveryURLs compares the result with package audit's Go functions.
--
-- The audit log itself is not rewritten: it is append-only and hash-chained.

-- audit.RedactURLSQL and audit.URLSha256SQL of 2026-12-04, for this migration.
CREATE FUNCTION pg_temp.redact_url(url text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN url IS NOT NULL THEN coalesce((SELECT m[1] || m[2] || '/…'
        FROM regexp_match(url, '^([^:/?#]*://)(?:[^/?#]*@)?([^/?#]*)') m), '…') END
$$;
CREATE FUNCTION pg_temp.url_sha256(url text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(sha256(convert_to(url, 'UTF8')), 'hex')
$$;

-- The metadata m of a webhook.* event with its URLs as the log records them now.
CREATE FUNCTION pg_temp.redact_webhook_metadata(m jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN jsonb_typeof(m -> 'url') = 'string' AND NOT m ? 'urlSha256' THEN
            m || jsonb_build_object('url', pg_temp.redact_url(m ->> 'url'), 'urlSha256', pg_temp.url_sha256(m ->> 'url'))
        WHEN jsonb_typeof(m -> 'changes' -> 'url') = 'object' AND NOT m -> 'changes' ? 'urlSha256' THEN
            jsonb_set(m, '{changes}', (m -> 'changes') || jsonb_build_object(
                'url', jsonb_build_object('from', pg_temp.redact_url(m #>> '{changes,url,from}'),
                    'to', pg_temp.redact_url(m #>> '{changes,url,to}')),
                'urlSha256', jsonb_build_object('from', pg_temp.url_sha256(m #>> '{changes,url,from}'),
                    'to', pg_temp.url_sha256(m #>> '{changes,url,to}'))))
        ELSE m END
$$;

UPDATE webhook_deliveries d
SET payload = convert_to(jsonb_set(b.body, '{data,metadata}', b.redacted)::text, 'UTF8')
FROM (SELECT id, body, pg_temp.redact_webhook_metadata(body #> '{data,metadata}') AS redacted
    FROM (SELECT id, convert_from(payload, 'UTF8')::jsonb AS body FROM webhook_deliveries
        WHERE action LIKE 'webhook.%') p) b
WHERE d.id = b.id AND b.redacted IS DISTINCT FROM b.body #> '{data,metadata}';

DROP FUNCTION pg_temp.redact_webhook_metadata(jsonb);
DROP FUNCTION pg_temp.url_sha256(text);
DROP FUNCTION pg_temp.redact_url(text);
