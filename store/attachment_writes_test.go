package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/uuid"

	"taskflow/errs"
	"taskflow/store"
)

// Concurrent uploads never take a workspace past its quota: the quota's
// count is a statement that starts once the workspace's upload lock is held,
// so it sees the attachments of the upload it waited for. Ten rounds of
// eight uploads of 300 bytes at once against a quota of 1,000: three fit
// each time, the others are CONFLICT (QuotaError, with the bytes used).
func TestConcurrentUploadsKeepTheQuota(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	task, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "files"})
	if err != nil {
		t.Fatal(err)
	}
	const n, size, quota = 8, 300, 1000
	for round := range 10 {
		results := make(chan error, n)
		start := make(chan struct{})
		for range n {
			key := uuid.NewString()
			if err := f.db.RegisterBlobUpload(ctx, key); err != nil {
				t.Fatal(err)
			}
			file := &store.UploadedFile{Key: key, Filename: "f.bin", ContentType: "application/octet-stream", Size: size,
				SHA256: fmt.Sprintf("%064x", rand.Uint64())}
			go func() {
				<-start
				_, err := f.db.AddAttachment(ctx, f.member, task.ID, store.Upload{UploadedFile: file}, quota)
				results <- err
			}()
		}
		close(start)
		added := 0
		for range n {
			switch err := <-results; {
			case err == nil:
				added++
			case errs.CodeOf(err) == errs.CodeConflict && strings.Contains(err.Error(), "quota"):
				var e *errs.Error
				if !errors.As(err, &e) || e.Extensions["used"] != int64(900) {
					t.Errorf("round %d: a refusal's extensions %v, want 900 bytes used", round, e.Extensions)
				}
			default:
				t.Errorf("round %d: an upload: %v", round, err)
			}
		}
		var used int64
		if err := f.db.Pool.QueryRow(ctx, `SELECT coalesce(sum(size), 0) FROM attachments WHERE task_id = $1`, task.ID).Scan(&used); err != nil {
			t.Fatal(err)
		}
		if added != 3 || used != 900 {
			t.Fatalf("round %d: %d of %d concurrent uploads added, %d bytes: want 3 and 900", round, added, n, used)
		}
		// The next round starts from an empty workspace: the attachments go,
		// and their bytes as the sweeper would delete them (else they are
		// held, and count towards twice the quota: HeldError).
		if _, err := f.db.Pool.Exec(ctx, `WITH a AS (DELETE FROM attachments WHERE task_id = $1 RETURNING workspace_id, sha256)
			DELETE FROM attachment_blobs b USING a WHERE b.workspace_id = a.workspace_id AND b.sha256 = a.sha256`, task.ID); err != nil {
			t.Fatal(err)
		}
	}
}
