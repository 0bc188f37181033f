-- The member caps of migrations 0013 and 0014 hold for UPDATEs too. Their
-- triggers fire on INSERT only, so SQL an operator runs that gives a
-- membership to another user (UPDATE members SET user_id = ...) or moves it
-- into another workspace (SET workspace_id = ...) bypassed them.
--
-- These are row triggers with a WHEN on the changed column, so the server's
-- own UPDATEs of members (updateMemberRole: SET role) never call them and
-- cost nothing more. A statement trigger as 0014's cannot be so selective:
-- transition tables are refused on a trigger with a column list, and one on
-- every UPDATE of members would capture every role change. The price is the
-- one 0014 avoided for INSERTs: an operator's UPDATE that moves k members
-- into a workspace counts its members k times (quadratic in a bulk move of
-- thousands; a move of a few is a few counts).
--
-- BEFORE the row, as 0013's: SQL run by a row-level BEFORE trigger sees the
-- rows the same statement changed before, so the rows of one UPDATE are
-- counted one after the other and the statement fails as a whole at the first
-- over a cap. Locks as the INSERTs': the user's row, then the workspace's
-- (triggers fire in name order: members_per_user_cap_on_update first), and
-- each count in a snapshot taken once its lock is held.
--
-- A membership given to another user (user_id changed) is counted against
-- that user's cap by 0013's function as it is: it counts the user's
-- memberships in other workspaces than the row's. A membership moved between
-- workspaces of one user does not change the user's count and is not checked.
-- A membership moved into another workspace (workspace_id changed) is counted
-- against that workspace's cap: it is refused when the workspace has its cap
-- of members already. A member replaced by another user in place does not
-- change the workspace's size and is not checked. The arguments are the
-- caps of 0013 and 0014 (store.MaxWorkspacesPerUser,
-- store.MaxMembersPerWorkspace; the store's tests check that they agree).

CREATE TRIGGER members_per_user_cap_on_update BEFORE UPDATE OF user_id ON members
    FOR EACH ROW WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION members_per_user_cap(1000);

CREATE FUNCTION members_per_workspace_cap_on_move() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap int := TG_ARGV[0]::int;
BEGIN
    PERFORM 1 FROM workspaces WHERE id = NEW.workspace_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM (SELECT 1 FROM members WHERE workspace_id = NEW.workspace_id LIMIT cap) m) >= cap THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'members_per_workspace_cap', TABLE = 'members',
            MESSAGE = format('workspace %s would have more than %s members, the most one workspace may', NEW.workspace_id, cap);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER members_per_workspace_cap_on_update BEFORE UPDATE OF workspace_id ON members
    FOR EACH ROW WHEN (OLD.workspace_id IS DISTINCT FROM NEW.workspace_id)
    EXECUTE FUNCTION members_per_workspace_cap_on_move(10000);
