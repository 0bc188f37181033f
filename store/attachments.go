package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/text/unicode/norm"

	"taskflow/errs"
)

// DefaultAttachmentPageSize is the page size of attachment lists when first is
// not given.
const DefaultAttachmentPageSize = 20

// Attachment is a file on a task. Its bytes are the blob of (WorkspaceID,
// SHA256) in the blob store; ContentType was sniffed from them.
type Attachment struct {
	ID          string    `json:"id" audit:"track"`
	TaskID      string    `json:"taskId" audit:"track"`
	WorkspaceID string    `json:"workspaceId" audit:"track"`
	Filename    string    `json:"filename" audit:"track"`
	ContentType string    `json:"contentType" audit:"track"`
	Size        int64     `json:"size" audit:"track"`
	SHA256      string    `json:"sha256" audit:"track"`
	UploaderID  string    `json:"uploaderId" audit:"track"`
	CreatedAt   time.Time `json:"createdAt" audit:"ignore"`
}

// Upload is the value of the GraphQL Upload scalar: a file part of a multipart
// request (the GraphQL multipart request specification). The transport puts
// one in the variables before the operation is validated and fills in its
// UploadedFile once it has streamed the part into the blob store, before the
// operation runs; copies share the UploadedFile.
type Upload struct{ *UploadedFile }

// UploadedFile is a file the transport wrote to the blob store: the object Key
// (registered by RegisterBlobUpload) holds Size bytes whose SHA-256 is SHA256
// (hex). Filename is the client's, cleaned; ContentType was sniffed from the
// bytes.
type UploadedFile struct {
	Key         string
	Filename    string
	ContentType string
	Size        int64
	SHA256      string
}

// UnmarshalGQL takes the Upload the transport placed in the variables; any
// other value (a string, a JSON object) is a BAD_USER_INPUT error: files come
// as parts of a multipart request.
func (u *Upload) UnmarshalGQL(v any) error {
	up, ok := v.(Upload)
	if !ok || up.UploadedFile == nil {
		return errs.Errorf(errs.CodeBadUserInput, "an Upload is a file sent as a part of a multipart/form-data request "+
			"(the GraphQL multipart request specification), with null in its place in the variables")
	}
	*u = up
	return nil
}

// MarshalGQL writes null: an Upload is input only.
func (u Upload) MarshalGQL(w io.Writer) { _, _ = io.WriteString(w, "null") }

// IdempotencyFingerprint is what an idempotency key's fingerprint covers of
// the file: its bytes (SHA-256 and size) and its name, not where the transport
// staged it, which differs on every retry.
func (u Upload) IdempotencyFingerprint() any {
	if u.UploadedFile == nil {
		return nil
	}
	return map[string]any{"sha256": u.SHA256, "size": u.Size, "filename": u.Filename}
}

// attachmentColumns is the column list scanned by scanAttachment (table alias a).
const attachmentColumns = `a.id, a.task_id, a.workspace_id, a.filename, a.content_type, a.size, a.sha256,
	a.uploader_id, a.created_at`

// scanAttachment scans the columns of attachmentColumns, followed by extra
// destinations.
func scanAttachment(row pgx.Row, extra ...any) (*Attachment, error) {
	var a Attachment
	dest := append([]any{&a.ID, &a.TaskID, &a.WorkspaceID, &a.Filename, &a.ContentType, &a.Size, &a.SHA256,
		&a.UploaderID, &a.CreatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	return &a, nil
}

// QuotaError is the CONFLICT error of an upload that would take a workspace's
// attachments over its storage quota, with extensions quota, used and size (in
// bytes).
func QuotaError(quota, used, size int64) *errs.Error {
	e := errs.Errorf(errs.CodeConflict, "the workspace's attachments would take %d bytes with this file, more than its "+
		"quota of %d bytes: delete attachments first", used+size, quota)
	e.Extensions = map[string]any{"quota": quota, "used": used, "size": size}
	return e
}

// heldQuotas is how many quotas a workspace's stored bytes can take, its
// attachments' and those of deleted files that wait for the sweeper
// (BLOB_SWEEP_GRACE) together: deleted files stop counting towards the quota
// at once, and without this bound uploading and deleting a file again and
// again stored without limit within the grace period.
const heldQuotas = 2

// HeldError is the CONFLICT error of an upload that fits the workspace's
// quota but would take its stored bytes (used by attachments, held for
// deleted files until the sweeper deletes them) over heldQuotas quotas, with
// extensions quota, used, held and size (in bytes).
func HeldError(quota, used, held, size int64) *errs.Error {
	e := errs.Errorf(errs.CodeConflict, "the workspace still stores %d bytes of deleted files, kept for a grace period "+
		"before they are deleted; with its attachments and this file it would store %d bytes, more than %d times its quota "+
		"of %d bytes: try again once they are deleted", held, used+held+size, heldQuotas, quota)
	e.Extensions = map[string]any{"quota": quota, "used": used, "held": held, "size": size}
	return e
}

// errUploadExpired answers the commit of an upload whose registration the
// sweeper removed: the upload took longer than the grace period.
var errUploadExpired = errs.Errorf(errs.CodeConflict,
	"the upload took longer than the server keeps unfinished uploads: send the file again")

// AddAttachment attaches an uploaded file to a task as actor (MEMBER or more)
// and records attachment.added. The file's bytes become the workspace's blob
// of their SHA-256: when the workspace has that content already, the existing
// blob is used and the staged object stays registered (its uploader discards
// it); else the staged object is adopted, its registration deleted in the same
// transaction. quota (> 0) bounds the total size of the workspace's distinct
// attached contents; content the workspace has already costs nothing. It
// returns a NOT_FOUND error if the task does not exist or is in a workspace
// actor is not a member of, FORBIDDEN for a VIEWER, CONFLICT (QuotaError) over
// the quota or when the staged object's registration is gone (the upload took
// longer than the sweeper's grace period), and BAD_USER_INPUT for a missing
// file.
func (db *DB) AddAttachment(ctx context.Context, actor *User, taskID string, file Upload, quota int64) (*Attachment, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if file.UploadedFile == nil {
		return nil, errs.Errorf(errs.CodeBadUserInput, "file is missing")
	}
	if !validID(taskID) {
		return nil, notFound("task")
	}
	canon := mustCanonical(taskID)
	f := file.UploadedFile
	out := &Attachment{ID: newID()}
	err := db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		// One round trip with the commit: the task's check, the quota's,
		// the blob, the attachment and its event.
		u := unitOfWorkFrom(ctx)
		rec, err := db.recordNow(ctx, actor, "attachment.added")
		if err != nil {
			return err
		}
		u.checkParent(parentTask, canon, actor, RoleMember, "attach files to tasks", "", nil)
		if quota > 0 {
			u.checkQuota(canon, f, quota)
		}
		// The workspace's blob of this content: ours, or the one it has. The
		// update of last_used_at makes a sweeper deleting it re-check and
		// spare it. Ours is adopted: from the commit on, the object is
		// referenced and no longer an upload, so its registration goes; the
		// sweeper deleted the registration (and the object) of an upload
		// older than its grace period, which refuses the unit of work.
		// (xmax = 0 tells the row this statement inserted from the one it
		// updated.)
		u.check(`WITH b AS (INSERT INTO attachment_blobs (workspace_id, sha256, key, size, content_type)
				SELECT t.workspace_id, $2, $3, $4, $5 FROM tasks t WHERE t.id = $1 AND taskflow_ok()
				ON CONFLICT (workspace_id, sha256) DO UPDATE SET last_used_at = now()
				RETURNING xmax = 0 AS adopted),
			r AS (DELETE FROM blob_uploads WHERE key = $3 AND (SELECT adopted FROM b) RETURNING 1)
			SELECT taskflow_check(CASE WHEN (SELECT adopted FROM b) AND NOT EXISTS (SELECT FROM r) THEN 'expired' END)`,
			[]any{canon, f.SHA256, f.Key, f.Size, f.ContentType}, refusals{"expired": errUploadExpired})
		event, params := recordedFrom(&rec, "d", "d.workspace_id", "d.id", attachmentSnapshotSQL,
			[]any{out.ID, canon, f.SHA256, f.Filename, actor.ID})
		queueRow(u, "add attachment", `WITH d AS (INSERT INTO attachments (id, task_id, workspace_id, sha256, filename,
					content_type, size, uploader_id)
				SELECT $1, $2, b.workspace_id, b.sha256, $4, b.content_type, b.size, $5 FROM attachment_blobs b
				WHERE b.workspace_id = (SELECT workspace_id FROM tasks WHERE id = $2) AND b.sha256 = $3 AND taskflow_ok()
				RETURNING *),
				e AS (`+event+`)
			SELECT `+attachmentColumns+` FROM d a`, params, scanAttachment, out)
		u.made(out, `(SELECT `+attachmentSnapshotSQL+` || jsonb_build_object('createdAt', `+rfc3339SQL("d.created_at")+`)
			FROM attachments d WHERE d.id = $5::uuid)`, out.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkQuota queues the refusal (QuotaError) of a file whose content is new
// to the workspace of the task taskID and would take its distinct attached
// contents over quota (> 0). Content is new unless an attachment of the
// workspace has it: a blob whose attachments were all deleted (kept for the
// grace period) counts in neither the room used nor as known, else deleting
// files and re-attaching them once others took their room would hold any
// multiple of the quota. Those held bytes count towards a bound of their
// own: the workspace's attached and held bytes together stay within
// heldQuotas quotas (HeldError), else uploading and deleting a file again and
// again stored without limit within the grace period; content the upload
// would attach again is not counted as held. It serialises the uploads of the workspace until
// the unit of work ends, so that two concurrent uploads cannot both fit in
// the same room: the lock, then, in a statement of its own whose snapshot is
// taken once the lock is held, the count.
func (u *unitOfWork) checkQuota(taskID string, f *UploadedFile, quota int64) {
	u.tx.queueDeferred(deferred{sql: `SELECT pg_advisory_xact_lock(hashtextextended('attachments:' ||
			(SELECT workspace_id FROM tasks WHERE id = $1), 0))`, args: []any{taskID},
		read: func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("add attachment: quota: %w", err)
			}
			return nil
		}})
	u.tx.queueDeferred(deferred{sql: `SELECT taskflow_check(CASE WHEN q.known THEN NULL
			WHEN q.used + $3 > $4 THEN 'quota:' || q.used || ':' || q.held
			WHEN q.used + q.held + $3 > ` + strconv.Itoa(heldQuotas) + ` * $4 THEN 'held:' || q.used || ':' || q.held END)
		FROM (SELECT EXISTS (SELECT 1 FROM attachments WHERE workspace_id = t.workspace_id AND sha256 = $2) AS known,
				coalesce(sum(b.size) FILTER (WHERE b.attached), 0)::bigint AS used,
				coalesce(sum(b.size) FILTER (WHERE NOT b.attached AND b.sha256 <> $2), 0)::bigint AS held
			FROM tasks t LEFT JOIN LATERAL (SELECT b.size, b.sha256, EXISTS (SELECT 1 FROM attachments a
					WHERE a.workspace_id = b.workspace_id AND a.sha256 = b.sha256) AS attached
				FROM attachment_blobs b WHERE b.workspace_id = t.workspace_id) b ON true
			WHERE t.id = $1 GROUP BY t.workspace_id) q`, args: []any{taskID, f.SHA256, f.Size, quota},
		read: func(br pgx.BatchResults) error {
			_, err := br.Exec()
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == refusalCode {
				// kind:used:held, kind quota or held.
				kind, rest, _ := strings.Cut(pgErr.Message, ":")
				if kind == "quota" || kind == "held" {
					usedText, heldText, _ := strings.Cut(rest, ":")
					used, uerr := strconv.ParseInt(usedText, 10, 64)
					held, herr := strconv.ParseInt(heldText, 10, 64)
					if uerr != nil || herr != nil {
						return fmt.Errorf("add attachment: %s refusal %q: %w", kind, pgErr.Message, errors.Join(uerr, herr))
					}
					if kind == "held" {
						return HeldError(quota, used, held, f.Size)
					}
					return QuotaError(quota, used, f.Size)
				}
			}
			if err != nil {
				return fmt.Errorf("add attachment: quota: %w", err)
			}
			return nil
		}})
}

// attachmentsTable is the attachments table for the write helpers.
var attachmentsTable = table[Attachment]{kind: "attachment", name: "attachments", alias: "a", columns: attachmentColumns,
	lock: "FOR UPDATE", scan: scanAttachment, event: func(a *Attachment) (string, string) { return a.WorkspaceID, a.ID }}

// DeleteAttachment deletes an attachment as actor and records
// attachment.deleted with its fields, in one round trip with the commit. Only
// the uploader (while MEMBER or more) or an ADMIN or OWNER may do it. The
// bytes stay while another attachment of the workspace has the same content;
// the sweeper removes them after the grace period once none has. It returns
// UNAUTHENTICATED for no actor, a NOT_FOUND error if the attachment does not
// exist or is in a workspace actor is not a member of, and FORBIDDEN for
// anyone else.
func (db *DB) DeleteAttachment(ctx context.Context, actor *User, id string) error {
	refuse, more, args := ownerOrAdmin("uploader_id",
		errs.Errorf(errs.CodeForbidden, "only the attachment's uploader or an ADMIN or OWNER may delete it"))
	return deleteRecorded(ctx, db, attachmentsTable, actor, id, RoleMember, "delete this attachment", "attachment.deleted",
		attachmentSnapshotSQL, refuse, more, args...)
}

// attachmentSnapshotSQL is audit.Snapshot of an Attachment as Postgres makes
// it from an attachments row d (TestSnapshotsInSQLAreGos compares them).
const attachmentSnapshotSQL = `jsonb_build_object('id', d.id, 'taskId', d.task_id, 'workspaceId', d.workspace_id,
	'filename', d.filename, 'contentType', d.content_type, 'size', d.size, 'sha256', d.sha256, 'uploaderId', d.uploader_id)`

// AttachmentForDownload returns an attachment that the user userID may read
// (any member of its workspace) and the key of its blob. It returns a
// NOT_FOUND error if the attachment does not exist, the id is malformed, or the
// user is not a member of its workspace.
func (db *DB) AttachmentForDownload(ctx context.Context, userID, id string) (*Attachment, string, error) {
	if !validID(id) || !validID(userID) {
		return nil, "", notFound("attachment")
	}
	var key string
	a, err := scanAttachment(db.q(ctx).QueryRow(ctx, `SELECT `+attachmentColumns+`, b.key FROM attachments a
		JOIN members m ON m.workspace_id = a.workspace_id AND m.user_id = $2
		JOIN attachment_blobs b ON b.workspace_id = a.workspace_id AND b.sha256 = a.sha256
		WHERE a.id = $1`, id, userID), &key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", notFound("attachment")
	}
	if err != nil {
		return nil, "", fmt.Errorf("attachment for download: %w", err)
	}
	return a, key, nil
}

// AttachmentPageKey names one page of a task's attachments: the task, the page
// size and the opaque cursor ("" for the first page). It is comparable, so
// loaders batch and cache by it.
type AttachmentPageKey struct {
	TaskID string
	First  int
	After  string
}

// attachmentList is Task.attachments.
var attachmentList = childList[Attachment]{
	table: "attachments", alias: "a", columns: attachmentColumns, pageSize: DefaultAttachmentPageSize,
	scope: func(taskID string) string { return "attachments:" + taskID },
	scan:  func(row pgx.Row, ord *int64) (*Attachment, error) { return scanAttachment(row, ord) },
	key:   attachmentKey,
}

// NewAttachmentPageKey validates a page request for a task's attachments
// (first nil means DefaultAttachmentPageSize) and returns its key. It returns a
// BAD_USER_INPUT error for first out of 1..100 or a cursor that is malformed or
// comes from another task's attachments.
func NewAttachmentPageKey(taskID string, first *int, after *string) (AttachmentPageKey, error) {
	k, err := attachmentList.newKey(taskID, first, after)
	return AttachmentPageKey(k), err
}

// AttachmentPages returns one page of attachments, newest first by
// (created_at, id), for each key, in the order of keys, with one query for all
// of them. It checks no access: callers pass tasks the viewer can see. It
// returns a BAD_USER_INPUT error for a key whose cursor is invalid (keys made
// by NewAttachmentPageKey never are).
func (db *DB) AttachmentPages(ctx context.Context, keys []AttachmentPageKey) ([]*AttachmentConnection, error) {
	return attachmentList.pages(ctx, db.q(ctx), childKeys(keys))
}

// attachmentKey returns an attachment's position in newest-first lists.
func attachmentKey(a *Attachment) (time.Time, string) { return a.CreatedAt, a.ID }

// maxFilenameBytes is the longest filename kept, in bytes of UTF-8 (what most
// file systems allow).
const maxFilenameBytes = 255

// CleanFilename returns the name under which a file is attached: the last
// element of the client's name (after the last / or \, as browsers on Windows
// may send C:\fakepath\x.png), without control characters, bidirectional
// controls (U+202E would show "invoice\u202Efdp.exe" as "invoiceexe.pdf") or
// invalid UTF-8, NFC-normalised, trimmed, cut to 255 bytes on a character
// boundary, and "file" when nothing is left (or only "." or "..").
func CleanFilename(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || r == 0x7f || unicode.Is(unicode.Bidi_Control, r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	name = strings.TrimSpace(norm.NFC.String(name))
	for len(name) > maxFilenameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	name = strings.TrimSpace(name)
	if name == "" || name == "." || name == ".." {
		return "file"
	}
	return name
}
