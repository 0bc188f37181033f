package store

import "context"

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
const WebhookSnapshotSQL = webhookSnapshotSQL
