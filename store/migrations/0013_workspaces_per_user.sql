-- The most workspaces one account may belong to: store.MaxWorkspacesPerUser,
-- the trigger's argument below (the store's tests check that they agree).
-- User.workspaces (me { workspaces }) is a list without pages, so what it
-- reads must stay bounded however many workspaces an account creates or
-- joins. It is a trigger rather than a check in each mutation so that every
-- way into members is bounded (createWorkspace, acceptInvitation, SQL an
-- operator runs) and no mutation gains a statement or a round trip.
--
-- Before a membership is inserted, the trigger locks its user's row FOR NO
-- KEY UPDATE, then counts the user's other memberships. Concurrent inserts
-- for one user take turns on the lock, on one instance or several, and each
-- counts in a snapshot taken once the lock is held (READ COMMITTED, which
-- every transaction of the server uses: each statement of a VOLATILE
-- function takes a snapshot of its own), so it sees the memberships
-- committed before it and two cannot both take the last place. The lock
-- ends with its transaction and is no session state, so PgBouncer's
-- transaction pooling keeps working; it does not block the foreign keys'
-- checks of rows that reference the user (FOR KEY SHARE: tokens, tasks,
-- comments), only another membership insert for the same user or an UPDATE
-- of the user's row, for the moment until the insert commits.
--
-- At the cap it raises check_violation naming members_per_user_cap, which
-- the store maps to its CONFLICT (store/errors.go, constraintErrors). A
-- membership the user has already is not counted, so inserting it again is
-- still members_pkey's conflict ("already a member"), not the cap's. The
-- count stops at the cap (LIMIT), so an insert reads at most that many
-- entries of members_user_idx. Memberships beyond the cap made before this
-- migration stay; such an account can join nothing until it is under it.

CREATE FUNCTION members_per_user_cap() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap int := TG_ARGV[0]::int;
BEGIN
    PERFORM 1 FROM users WHERE id = NEW.user_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM (SELECT 1 FROM members
            WHERE user_id = NEW.user_id AND workspace_id <> NEW.workspace_id LIMIT cap) m) >= cap THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'members_per_user_cap', TABLE = 'members',
            MESSAGE = format('user %s belongs to %s workspaces, the most one account may', NEW.user_id, cap);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER members_per_user_cap BEFORE INSERT ON members
    FOR EACH ROW EXECUTE FUNCTION members_per_user_cap(1000);
