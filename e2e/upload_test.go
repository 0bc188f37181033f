package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// uploadResult is what e2e/node/upload.mjs prints.
type uploadResult struct {
	First struct {
		ID, Filename, ContentType, SHA256, DownloadURL string
		Size                                           int64
	}
	RetryID     string
	Reused      string
	LocalSHA256 string
	Size        int64
	Download    struct {
		Status                                          int
		SHA256, ContentType, Disposition, Nosniff, ETag string
	}
	Range struct {
		Status    int
		Hex, Want string
	}
}

// Apollo Client with apollo-upload-client, a real JavaScript client from npm,
// sends a file over the GraphQL multipart request specification: the server
// stores it once with the client's SHA-256 and the type sniffed from the bytes,
// replays a retry with the same idempotency key, refuses the key with other
// bytes, and serves the file back from its downloadUrl, whole and by range.
func TestApolloUploadClient(t *testing.T) {
	t.Parallel()
	nodeModules(t)
	env := apitest.New(t)
	member := env.NewUser(t, "member")
	ctx := context.Background()
	task := env.NewTask(t, member, "MEMBER")
	out := runNode(t, 2*time.Minute, []string{"TOKEN=" + member.Token, "TASK=" + task}, "upload.mjs", env.Server.URL+"/query")
	var r uploadResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("upload.mjs printed %q: %v", out, err)
	}
	if r.First.SHA256 != r.LocalSHA256 || r.First.Size != r.Size || r.First.ContentType != "image/png" ||
		r.First.Filename != "screenshot.png" {
		t.Errorf("attachment %+v; want sha %s, size %d, image/png", r.First, r.LocalSHA256, r.Size)
	}
	if r.RetryID != r.First.ID || r.Reused != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("retry answered %s (want %s); other bytes with the key: %q", r.RetryID, r.First.ID, r.Reused)
	}
	d := r.Download
	if d.Status != http.StatusOK || d.SHA256 != r.LocalSHA256 || d.ContentType != "image/png" || d.Nosniff != "nosniff" ||
		d.ETag != `"`+r.LocalSHA256+`"` || d.Disposition != `attachment; filename=screenshot.png` {
		t.Errorf("download %+v", d)
	}
	if r.Range.Status != http.StatusPartialContent || r.Range.Hex != r.Range.Want {
		t.Errorf("range %+v", r.Range)
	}
	var attachments, objects int
	if err := env.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM attachments`).Scan(&attachments); err != nil {
		t.Fatal(err)
	}
	keys, err := env.Blobs.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	objects = len(keys)
	if attachments != 1 || objects != 1 {
		t.Errorf("%d attachments and %d objects stored, want 1 and 1", attachments, objects)
	}
}
