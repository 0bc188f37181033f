-- The most members one workspace may have: store.MaxMembersPerWorkspace, the
-- trigger's argument below (the store's tests check that they agree).
-- Workspace.members is a list without pages, so what it reads must stay
-- bounded however many people join. It is the symmetric of migration 0013's
-- members_per_user_cap, and a trigger for the same reasons: every way into
-- members is bounded (acceptInvitation, createWorkspace's OWNER, SQL an
-- operator runs) and no mutation gains a statement or a round trip.
--
-- After a statement inserts memberships, the trigger locks the row of each
-- workspace they join FOR NO KEY UPDATE (in id order), then counts its
-- members. Concurrent inserts into one workspace take turns on the lock, on
-- one instance or several, and each counts in a snapshot taken once the lock
-- is held (READ COMMITTED, which every transaction of the server uses: each
-- statement of a VOLATILE function takes a snapshot of its own), so it sees
-- the memberships committed before it and its own, and two cannot both take
-- the last place. acceptInvitation holds that lock already (it takes the
-- workspace's lock first, store/invitations.go), so the trigger's costs it
-- nothing more. A membership insert locks its user's row first (0013's
-- trigger, before the row), then its workspace's, and no statement of the
-- server locks a user's row and then a workspace's otherwise. The lock does
-- not block the foreign keys' checks of rows that reference the workspace
-- (FOR KEY SHARE: projects, tasks, invitations), only another membership
-- change of the workspace or an UPDATE of its row, until the insert commits.
--
-- It is a statement trigger, unlike 0013's row trigger, so that an operator's
-- bulk INSERT counts each workspace once: a row trigger counts for each row,
-- and its count in the inserting transaction, whose rows are not yet
-- all-visible, reads the heap, so 10,000 members added in one statement took
-- 14 s (quadratic); this way, a few milliseconds.
--
-- Past the cap it raises check_violation naming members_per_workspace_cap,
-- which the store maps to its CONFLICT (store/errors.go, constraintErrors);
-- the statement, and its transaction, then change nothing. A membership that
-- exists already fails on members_pkey first ("already a member"). The count
-- stops past the cap (LIMIT), so it reads at most that many entries of
-- members_pkey and one more. Workspaces past the cap before this migration
-- keep their members; such a workspace takes no one until it is under it.

CREATE FUNCTION members_per_workspace_cap() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap int := TG_ARGV[0]::int;
    ws uuid;
BEGIN
    FOR ws IN SELECT DISTINCT workspace_id FROM new_members ORDER BY workspace_id LOOP
        PERFORM 1 FROM workspaces WHERE id = ws FOR NO KEY UPDATE;
        IF (SELECT count(*) FROM (SELECT 1 FROM members WHERE workspace_id = ws LIMIT cap + 1) m) > cap THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'members_per_workspace_cap', TABLE = 'members',
                MESSAGE = format('workspace %s would have more than %s members, the most one workspace may', ws, cap);
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER members_per_workspace_cap AFTER INSERT ON members
    REFERENCING NEW TABLE AS new_members
    FOR EACH STATEMENT EXECUTE FUNCTION members_per_workspace_cap(10000);
