package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defer queues sql as a deferred statement of the unit of work of ctx, for the
// tests of the pipeline (package store_test).
func Defer(ctx context.Context, sql string, args ...any) {
	unitOfWorkFrom(ctx).tx.queueDeferred(deferred{sql: sql, args: args})
}

// TaskSnapshotSQL is taskSnapshotSQL, for TestSnapshotsInSQLAreGos.
var TaskSnapshotSQL = taskSnapshotSQL

// CommentSnapshotSQL is commentSnapshotSQL, for TestSnapshotsInSQLAreGos.
const CommentSnapshotSQL = commentSnapshotSQL

// AttachmentSnapshotSQL is attachmentSnapshotSQL, for TestSnapshotsInSQLAreGos.
const AttachmentSnapshotSQL = attachmentSnapshotSQL

// WebhookSnapshotSQL is webhookSnapshotSQL, for TestSnapshotsInSQLAreGos.
var WebhookSnapshotSQL = webhookSnapshotSQL

// Read is read, for the tests of the read batcher (package store_test).
func (db *DB) Read(ctx context.Context, queue func(b *pgx.Batch), read func(br pgx.BatchResults) error) error {
	return db.read(ctx, queue, read)
}

// ExpireRemembered makes what db remembers of the token with this SHA-256 a
// read whose validity has just ended (its expiry reached since it was read),
// for TestCachedUserByTokenHash; it does nothing when db remembers nothing.
func (db *DB) ExpireRemembered(hash []byte) {
	key := string(hash)
	if s, ok := db.sessions.entries.GetIfPresent(key); ok {
		expired := *s
		expired.expires = time.Now()
		db.sessions.entries.Set(key, &expired)
	}
}

// ClaimSQL and RecordSQL are the key's claim and record read, for
// TestKeyReadsUseTheIndex.
const (
	ClaimSQL  = claimSQL
	RecordSQL = recordSQL
)

// SearchSQL is the statement of a search page of ListedTaskFields, counting
// the matches when counted, for TestSearchLooksAtItsMatchesOnce.
func SearchSQL(counted bool) string { return searchSQL(listedTaskColumns, counted) }
