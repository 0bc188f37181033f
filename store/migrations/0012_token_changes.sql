-- token_changes: one row per change to what a bearer token means (revoked,
-- deleted, its expiry, user or hash changed, or its user's e-mail or name),
-- written by triggers so that SQL an operator runs counts as much as a
-- logout. Every instance's revocation feed (store/sessions.go,
-- RunRevocationFeed) reads the rows past its cursor a few times a second and
-- stops trusting what it remembered of those tokens; that is what lets an
-- instance remember a token for minutes and still refuse a revoked one
-- within a second. changed_xid orders the rows the way the feed needs (see
-- the proof in store/sessions.go); rows older than a day are deleted by the
-- feeds (none concerns what an instance still remembers).

CREATE TABLE token_changes (
    token_hash  bytea NOT NULL,
    changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX token_changes_xid_idx ON token_changes (changed_xid);

CREATE FUNCTION token_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO token_changes (token_hash) VALUES (OLD.token_hash);
    RETURN NULL;
END $$;

CREATE TRIGGER tokens_deleted AFTER DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION token_changed();
CREATE TRIGGER tokens_changed AFTER UPDATE ON tokens
    FOR EACH ROW WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at
        OR OLD.expires_at IS DISTINCT FROM NEW.expires_at
        OR OLD.user_id IS DISTINCT FROM NEW.user_id
        OR OLD.token_hash IS DISTINCT FROM NEW.token_hash)
    EXECUTE FUNCTION token_changed();

-- An instance remembers a token's user (e-mail and name) with it.
CREATE FUNCTION user_tokens_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO token_changes (token_hash)
        SELECT token_hash FROM tokens WHERE user_id = NEW.id AND revoked_at IS NULL AND expires_at > now();
    RETURN NULL;
END $$;

CREATE TRIGGER users_changed AFTER UPDATE ON users
    FOR EACH ROW WHEN (OLD.email IS DISTINCT FROM NEW.email OR OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION user_tokens_changed();
