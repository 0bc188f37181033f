-- Accounts, workspaces, projects, tasks and comments.

CREATE TABLE users (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email         text NOT NULL,
    name          text NOT NULL,
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_email_key UNIQUE (email),
    CONSTRAINT users_email_lower CHECK (email = lower(email))
);

-- tokens holds only the SHA-256 of each bearer token.
CREATE TABLE tokens (
    token_hash bytea PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX tokens_user_idx ON tokens (user_id);

CREATE TABLE workspaces (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE members (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role         text NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'MEMBER', 'VIEWER')),
    joined_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT members_pkey PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX members_user_idx ON members (user_id, workspace_id);

CREATE TABLE projects (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name         text NOT NULL,
    description  text,
    archived_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX projects_page_idx ON projects (workspace_id, created_at DESC, id DESC);

CREATE TABLE tasks (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id   uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    title        text NOT NULL,
    description  text,
    status       text NOT NULL DEFAULT 'TODO' CHECK (status IN ('TODO', 'IN_PROGRESS', 'DONE')),
    priority     text NOT NULL DEFAULT 'MEDIUM' CHECK (priority IN ('LOW', 'MEDIUM', 'HIGH', 'URGENT')),
    assignee_id  uuid,
    due_date     timestamptz,
    created_by   uuid NOT NULL REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    search       tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') ||
        setweight(to_tsvector('english', coalesce(description, '')), 'B')
    ) STORED,
    -- An assignee is a member of the task's workspace; removing the member unassigns.
    CONSTRAINT tasks_assignee_member_fkey FOREIGN KEY (workspace_id, assignee_id)
        REFERENCES members (workspace_id, user_id) ON DELETE SET NULL (assignee_id)
);
CREATE INDEX tasks_page_idx ON tasks (project_id, created_at DESC, id DESC);
CREATE INDEX tasks_status_page_idx ON tasks (project_id, status, created_at DESC, id DESC);
CREATE INDEX tasks_workspace_idx ON tasks (workspace_id);
CREATE INDEX tasks_search_idx ON tasks USING gin (search);

CREATE TABLE comments (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id      uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    author_id    uuid NOT NULL REFERENCES users (id),
    body         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX comments_page_idx ON comments (task_id, created_at DESC, id DESC);
