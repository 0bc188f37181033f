-- Attachments: files on tasks. The bytes live in the blob store (BLOB_URL),
-- content-addressed by SHA-256 within a workspace through attachment_blobs: the
-- same file attached twice in a workspace is stored once. An object's name in
-- the store is random (its hash is known only once its bytes are written, and
-- object stores cannot rename), so the database says which object holds which
-- content, and which objects are garbage:
--
--   * blob_uploads registers an object before its first byte is written; the
--     transaction that commits the first attachment of its content deletes the
--     registration and inserts its attachment_blobs row, atomically. An object
--     is always registered, referenced, or garbage.
--   * the sweeper (blobs.Sweeper) deletes registrations older than the grace
--     period with their objects, attachment_blobs rows no attachment has used
--     for the grace period with theirs, and objects the database does not know.

CREATE TABLE attachment_blobs (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    -- The object's key in the blob store, under the deployment's prefix.
    key          text NOT NULL,
    size         bigint NOT NULL CHECK (size >= 0),
    content_type text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Set by every upload of the content: the sweeper spares a blob used within
    -- the grace period, and a concurrent upload's update makes it re-check.
    last_used_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT attachment_blobs_pkey PRIMARY KEY (workspace_id, sha256),
    CONSTRAINT attachment_blobs_key_key UNIQUE (key)
);
-- The sweeper's candidates: blobs not used lately.
CREATE INDEX attachment_blobs_last_used_idx ON attachment_blobs (last_used_at);

CREATE TABLE attachments (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id      uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    sha256       text NOT NULL,
    filename     text NOT NULL,
    content_type text NOT NULL,
    size         bigint NOT NULL,
    uploader_id  uuid NOT NULL REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- No attachment points at a blob the sweeper removed.
    CONSTRAINT attachments_blob_fkey FOREIGN KEY (workspace_id, sha256)
        REFERENCES attachment_blobs (workspace_id, sha256)
);
-- Task.attachments, newest first.
CREATE INDEX attachments_page_idx ON attachments (task_id, created_at DESC, id DESC);
-- Whether a blob is still used, and a workspace's storage in use.
CREATE INDEX attachments_blob_idx ON attachments (workspace_id, sha256);

-- Objects being uploaded: registered before the first byte is written.
CREATE TABLE blob_uploads (
    key        text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX blob_uploads_started_idx ON blob_uploads (started_at);

-- When the sweeper last ran: one instance of many sweeps per interval.
CREATE TABLE blob_sweeps (
    id       int PRIMARY KEY CHECK (id = 1),
    last_run timestamptz NOT NULL
);

-- Values every instance of a deployment shares, made once by the first that
-- needs them: the key of signed download links, the prefix of the deployment's
-- objects in the blob store.
CREATE TABLE server_secrets (
    name       text PRIMARY KEY,
    value      bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
