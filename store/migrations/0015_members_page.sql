-- Workspace.membersConnection: a workspace's members a page at a time, newest
-- first by (joined_at, user_id), the order Workspace.members lists them in.
-- Each page is a keyset read of this index from its cursor's position,
-- LIMIT first + 1, so a page of the 10,000th member reads what a page of the
-- first does; without it every page read and sorted all the workspace's
-- members (members_pkey is by user id). It serves the deprecated
-- Workspace.members' ORDER BY too.
--
-- User.workspacesConnection needs no index of its own: its order is the
-- workspace's (created_at, id), which lives in another table than the
-- membership it filters on, and what it sorts is bounded by the user's
-- memberships (members_user_idx, at most store.MaxWorkspacesPerUser).
--
-- A migration runs in a transaction, so this is not CONCURRENTLY: the build
-- blocks membership changes (not reads) while it reads members once.

CREATE INDEX members_page_idx ON members (workspace_id, joined_at DESC, user_id DESC);
