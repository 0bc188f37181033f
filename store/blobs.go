package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The life of an object in the blob store, as the database records it (see
// migration 0010): registered (blob_uploads) from before its first byte until
// the transaction of the first attachment of its content deletes the
// registration and inserts its attachment_blobs row; referenced while that row
// exists; garbage otherwise. Only the sweeper and the uploader delete objects,
// and only after the database says they are garbage.

// RegisterBlobUpload records that the object key is about to be written, so
// that the sweeper spares it for the grace period. It commits at once, outside
// any unit of work.
func (db *DB) RegisterBlobUpload(ctx context.Context, key string) error {
	if _, err := db.Pool.Exec(ctx, `INSERT INTO blob_uploads (key) VALUES ($1)`, key); err != nil {
		return fmt.Errorf("register blob upload: %w", err)
	}
	return nil
}

// BlobReferenced reports whether the object key is the blob of some content
// (an attachment adopted it).
func (db *DB) BlobReferenced(ctx context.Context, key string) (bool, error) {
	var ok bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attachment_blobs WHERE key = $1)`, key).Scan(&ok); err != nil {
		return false, fmt.Errorf("blob referenced: %w", err)
	}
	return ok, nil
}

// ForgetBlobUpload deletes the registration of the object key, once the
// object is deleted (or was never written).
func (db *DB) ForgetBlobUpload(ctx context.Context, key string) error {
	if _, err := db.Pool.Exec(ctx, `DELETE FROM blob_uploads WHERE key = $1`, key); err != nil {
		return fmt.Errorf("forget blob upload: %w", err)
	}
	return nil
}

// ClaimBlobSweep reports whether this caller is the one to sweep now: true at
// most once per interval among all instances (the first to ask since the last
// sweep). It costs one statement and holds no lock.
func (db *DB) ClaimBlobSweep(ctx context.Context, interval time.Duration) (bool, error) {
	tag, err := db.Pool.Exec(ctx, `INSERT INTO blob_sweeps (id, last_run) VALUES (1, now())
		ON CONFLICT (id) DO UPDATE SET last_run = now()
		WHERE blob_sweeps.last_run <= now() - make_interval(secs => $1)`, interval.Seconds())
	if err != nil {
		return false, fmt.Errorf("claim blob sweep: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ExpireBlobUploads deletes up to limit registrations older than grace and
// returns their keys, whose objects the caller deletes next: from now on no
// attachment can adopt them (AddAttachment's delete of the registration finds
// nothing and fails). An object whose deletion is lost (a crash) is unknown to
// the database, and found by UnknownBlobs.
func (db *DB) ExpireBlobUploads(ctx context.Context, grace time.Duration, limit int) ([]string, error) {
	return db.collectKeys(ctx, "expire blob uploads", `DELETE FROM blob_uploads WHERE key IN (
			SELECT key FROM blob_uploads WHERE started_at < now() - make_interval(secs => $1)
			ORDER BY started_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING key`, grace.Seconds(), limit)
}

// DropUnusedBlobs deletes up to limit blobs that no attachment has and that no
// upload used within grace, and returns their keys, whose objects the caller
// deletes next. An upload of the same content at the same moment either
// finds the blob gone and adopts its own object, or updates the blob's
// last_used_at first, which makes this delete re-check the row and spare it.
func (db *DB) DropUnusedBlobs(ctx context.Context, grace time.Duration, limit int) ([]string, error) {
	return db.collectKeys(ctx, "drop unused blobs", `DELETE FROM attachment_blobs b WHERE (b.workspace_id, b.sha256) IN (
			SELECT c.workspace_id, c.sha256 FROM attachment_blobs c
			WHERE c.last_used_at < now() - make_interval(secs => $1)
				AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.workspace_id = c.workspace_id AND a.sha256 = c.sha256)
			ORDER BY c.last_used_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			AND b.last_used_at < now() - make_interval(secs => $1)
			AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.workspace_id = b.workspace_id AND a.sha256 = b.sha256)
		RETURNING b.key`, grace.Seconds(), limit)
}

// UnknownBlobs returns the keys, of those given, that are neither registered
// uploads, blobs of any content nor files of audit exports: objects nothing can ever adopt (a
// registration is made before its object's first byte, and only a
// registration can be adopted), left by a crash between a database change and
// the deletion of its object.
func (db *DB) UnknownBlobs(ctx context.Context, keys []string) ([]string, error) {
	return db.collectKeys(ctx, "unknown blobs", `SELECT k FROM unnest($1::text[]) AS k
		WHERE NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.key = k)
			AND NOT EXISTS (SELECT 1 FROM attachment_blobs b WHERE b.key = k)
			AND NOT EXISTS (SELECT 1 FROM audit_exports x WHERE x.object_key = k)`, keys)
}

// collectKeys runs a statement that returns one text column and collects it.
func (db *DB) collectKeys(ctx context.Context, what, sql string, args ...any) ([]string, error) {
	rows, err := db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return keys, nil
}

// ServerSecret returns the deployment's value named name, made by fresh (and
// stored) by the first instance that asks; every instance gets the same.
func (db *DB) ServerSecret(ctx context.Context, name string, fresh func() []byte) ([]byte, error) {
	var v []byte
	err := db.Pool.QueryRow(ctx, `WITH made AS (
			INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING value)
		SELECT value FROM made UNION ALL SELECT value FROM server_secrets WHERE name = $1`, name, fresh()).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		// Made by another instance between the insert's check and the read.
		err = db.Pool.QueryRow(ctx, `SELECT value FROM server_secrets WHERE name = $1`, name).Scan(&v)
	}
	if err != nil {
		return nil, fmt.Errorf("server secret %s: %w", name, err)
	}
	return v, nil
}
