package blobs_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"taskflow/blobs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// The S3 driver does what the store needs of it, against gofakes3 (an S3
// server in the test process, spoken to over HTTP by the AWS SDK): a file
// staged and adopted, its bytes read back by range, an unadopted upload
// released, and the sweep's listing by modification time. The URL is the one
// an operator writes for an S3-compatible store.
func TestS3Store(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("attachments"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	db := storetest.DB(t)
	bs, err := blobs.Open(t.Context(), blobs.Options{
		URL: "s3://attachments?region=us-east-1&use_path_style=true&disable_https=true&endpoint=" + srv.URL,
		DB:  db, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	s := &setup{db: db, bs: bs, owner: &store.User{}}
	s.fixture(t)
	ctx := context.Background()

	content := strings.Repeat("0123456789", 100_000) // 1 MB: more than one read
	f, err := bs.Stage(ctx, strings.NewReader(content), "digits.txt", 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	s.attach(t, f)
	bs.Release(ctx, f)
	dropped := s.stage(t, "not attached")
	bs.Release(ctx, dropped)
	if keys := s.objects(t); len(keys) != 1 || keys[0] != f.Key {
		t.Fatalf("objects %v, want [%s]", keys, f.Key)
	}
	rd, err := bs.NewReader(ctx, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := rd.Seek(500_003, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(rd, buf); err != nil || string(buf) != "34567" || rd.Size() != int64(len(content)) {
		t.Fatalf("read %q at 500003 of %d bytes: %v", buf, rd.Size(), err)
	}
	orphan := s.stage(t, "orphan")
	if _, err := db.Pool.Exec(ctx, `DELETE FROM blob_uploads WHERE key = $1`, orphan.Key); err != nil {
		t.Fatal(err)
	}
	if got := s.sweep(t, 0); got != (blobs.Swept{}) {
		t.Fatalf("swept %+v within the grace period", got)
	}
	if got := s.sweep(t, 2*time.Hour); got.Unknown != 1 {
		t.Fatalf("swept %+v, want the unknown object", got)
	}
	if keys := s.objects(t); len(keys) != 1 || keys[0] != f.Key {
		t.Fatalf("objects %v after the sweep, want [%s]", keys, f.Key)
	}
}
