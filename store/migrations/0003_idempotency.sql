-- Idempotency keys: one row per (user, key), written in the mutation's transaction.

CREATE TABLE idempotency_keys (
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key         text NOT NULL,
    field       text NOT NULL,
    fingerprint bytea NOT NULL,
    result      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (user_id, key)
);
CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at);
