-- Invitations: a workspace membership needs the invitee's consent. An OWNER or
-- ADMIN invites an e-mail address; whoever signs in with an account of that
-- address accepts (becomes a member) or declines. The table holds only open
-- invitations: accepting, declining and revoking delete the row (the audit log
-- keeps the history), and an invitation past expires_at stays until its
-- workspace invites again, which deletes the expired ones first.

CREATE TABLE invitations (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    email        text NOT NULL CHECK (email = lower(email)),
    role         text NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'MEMBER', 'VIEWER')),
    invited_by   uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at   timestamptz NOT NULL,
    -- One open invitation per address and workspace.
    CONSTRAINT invitations_workspace_email_key UNIQUE (workspace_id, email)
);
-- Workspace.invitations, newest first.
CREATE INDEX invitations_page_idx ON invitations (workspace_id, created_at DESC, id DESC);
-- User.invitations (the signed-in user's, by e-mail), newest first.
CREATE INDEX invitations_email_idx ON invitations (email, created_at DESC, id DESC);
