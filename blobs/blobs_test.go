package blobs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// setup is a blob store in a temporary directory on a fresh database with a
// workspace, its owner and a task.
type setup struct {
	dir   string // the bucket's directory
	db    *store.DB
	bs    *blobs.Store
	owner *store.User
	task  string
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	db, dir := storetest.DB(t), t.TempDir()
	bs, err := blobs.Open(t.Context(), blobs.Options{URL: "file://" + filepath.ToSlash(dir) + "?no_tmp_dir=true&metadata=skip",
		DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	s := &setup{dir: dir, db: db, bs: bs, owner: &store.User{}}
	s.fixture(t)
	return s
}

// fixture makes the workspace, its owner and the task.
func (s *setup) fixture(t *testing.T) {
	t.Helper()
	db := s.db
	ctx := context.Background()
	var ws, project string
	err := db.Pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (email, name, password_hash) VALUES ('o@example.com', 'O', 'x') RETURNING id),
		w AS (INSERT INTO workspaces (name) VALUES ('w') RETURNING id),
		m AS (INSERT INTO members (workspace_id, user_id, role) SELECT w.id, u.id, 'OWNER' FROM w, u RETURNING 1)
		SELECT (SELECT id FROM u), (SELECT id FROM w), (SELECT count(*) FROM m)::text`).Scan(&s.owner.ID, &ws, new(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'p') RETURNING id`, ws).Scan(&project); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO tasks (project_id, workspace_id, title, created_by) VALUES ($1, $2, 't', $3) RETURNING id`,
		project, ws, s.owner.ID).Scan(&s.task); err != nil {
		t.Fatal(err)
	}
}

// objects returns the keys of the store's objects.
func (s *setup) objects(t *testing.T) []string {
	t.Helper()
	keys, err := s.bs.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// stage stages content as a file.
func (s *setup) stage(t *testing.T, content string) *store.UploadedFile {
	t.Helper()
	f, err := s.bs.Stage(context.Background(), strings.NewReader(content), "a.txt", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// attach attaches a staged file to the task.
func (s *setup) attach(t *testing.T, f *store.UploadedFile) *store.Attachment {
	t.Helper()
	a, err := s.db.AddAttachment(context.Background(), s.owner, s.task, store.Upload{UploadedFile: f}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// backdate moves the registrations and the blobs' last use two hours back.
func (s *setup) backdate(t *testing.T) {
	t.Helper()
	if _, err := s.db.Pool.Exec(context.Background(), `UPDATE blob_uploads SET started_at = started_at - interval '2 hours';
		UPDATE attachment_blobs SET last_used_at = last_used_at - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
}

// sweep sweeps as if at now plus ahead.
func (s *setup) sweep(t *testing.T, ahead time.Duration) blobs.Swept {
	t.Helper()
	swept, err := s.bs.Sweep(context.Background(), time.Now().Add(ahead))
	if err != nil {
		t.Fatal(err)
	}
	return swept
}

// Stage writes the bytes, their SHA-256, size and sniffed type; a file over
// the limit or a body that fails leaves nothing, neither object nor
// registration.
func TestStage(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	f := s.stage(t, "hello\n")
	if f.SHA256 != "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03" || f.Size != 6 ||
		f.ContentType != "text/plain; charset=utf-8" || f.Filename != "a.txt" {
		t.Fatalf("staged %+v", f)
	}
	if keys := s.objects(t); len(keys) != 1 || keys[0] != f.Key {
		t.Fatalf("objects %v, want [%s]", keys, f.Key)
	}
	_, err := s.bs.Stage(context.Background(), strings.NewReader("12345678901"), "b", 10)
	if !errors.Is(err, blobs.ErrTooLarge) {
		t.Fatalf("11 bytes over a limit of 10: %v", err)
	}
	_, err = s.bs.Stage(context.Background(), io.MultiReader(strings.NewReader("part"), iotest.ErrReader(io.ErrUnexpectedEOF)), "c", 10)
	if !errors.Is(err, blobs.ErrRead) {
		t.Fatalf("a failing body: %v", err)
	}
	var uploads int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM blob_uploads`).Scan(&uploads); err != nil || uploads != 1 {
		t.Fatalf("%d registrations (%v), want 1", uploads, err)
	}
	if keys := s.objects(t); len(keys) != 1 {
		t.Fatalf("objects %v, want only %s", keys, f.Key)
	}
}

// Release deletes the object and the registration of a file no attachment
// adopted, and keeps an adopted one; content the workspace has already is
// stored once.
func TestReleaseKeepsOnlyAdopted(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	dropped := s.stage(t, "never attached")
	s.bs.Release(context.Background(), dropped)
	first := s.stage(t, "same bytes")
	s.attach(t, first)
	s.bs.Release(context.Background(), first)
	second := s.stage(t, "same bytes")
	a := s.attach(t, second)
	s.bs.Release(context.Background(), second)
	if keys := s.objects(t); len(keys) != 1 || keys[0] != first.Key {
		t.Fatalf("objects %v, want only the first upload's %s", keys, first.Key)
	}
	_, key, err := s.db.AttachmentForDownload(context.Background(), s.owner.ID, a.ID)
	if err != nil || key != first.Key {
		t.Fatalf("the second attachment's blob is %q (%v), want %s", key, err, first.Key)
	}
}

// A crash between the write of the bytes and the commit of the attachment
// leaves a registered object: the sweeper spares it for the grace period,
// then deletes it; an attachment committed before it is never swept, nor is
// one whose content another attachment still has after a delete; a blob no
// attachment has, once its last upload is older than the grace period, goes.
// An object
// the database does not know goes after the grace period too, and an upload
// that outlived its registration fails instead of pointing at nothing.
func TestSweeper(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	kept := s.stage(t, "attached")
	a1 := s.attach(t, kept)
	a2 := s.attach(t, s.stage(t, "attached")) // the same content: kept's blob
	crashed := s.stage(t, "the process died before the commit")
	if got := s.sweep(t, 0); got != (blobs.Swept{}) {
		t.Fatalf("a sweep within the grace period deleted %+v", got)
	}
	s.backdate(t)
	if got := s.sweep(t, 0); got.Uploads != 2 || got.Unused != 0 { // crashed, and a2's unadopted copy
		t.Fatalf("swept %+v, want the 2 unadopted uploads", got)
	}
	if keys := s.objects(t); len(keys) != 1 || keys[0] != kept.Key {
		t.Fatalf("objects %v, want only %s (not %s)", keys, kept.Key, crashed.Key)
	}

	// Deleting one attachment keeps the bytes the other has.
	if err := s.db.DeleteAttachment(ctx, s.owner, a1.ID); err != nil {
		t.Fatal(err)
	}
	s.backdate(t)
	if got := s.sweep(t, 3*time.Hour); got != (blobs.Swept{}) {
		t.Fatalf("swept %+v while an attachment has the bytes", got)
	}
	if err := s.db.DeleteAttachment(ctx, s.owner, a2.ID); err != nil {
		t.Fatal(err)
	}
	if got := s.sweep(t, 0); got.Unused != 1 {
		t.Fatalf("swept %+v, want the unused blob", got)
	}
	if keys := s.objects(t); len(keys) != 0 {
		t.Fatalf("objects %v left", keys)
	}

	// An object nobody knows: kept while recent, deleted once older than
	// the grace period.
	orphan := s.stage(t, "orphan")
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM blob_uploads WHERE key = $1`, orphan.Key); err != nil {
		t.Fatal(err)
	}
	if got := s.sweep(t, 0); got.Unknown != 0 {
		t.Fatalf("swept %+v: a recent object", got)
	}
	if got := s.sweep(t, 2*time.Hour); got.Unknown != 1 || len(s.objects(t)) != 0 {
		t.Fatalf("swept %+v, objects %v; want the unknown object gone", got, s.objects(t))
	}

	// An upload swept before its commit cannot be attached.
	late := s.stage(t, "slow")
	s.backdate(t)
	s.sweep(t, 0)
	_, err := s.db.AddAttachment(ctx, s.owner, s.task, store.Upload{UploadedFile: late}, 0)
	if errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("attaching a swept upload: %v, want CONFLICT", err)
	}
	var n int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM attachments`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d attachments (%v), want 0", n, err)
	}
}

// Download links open the attachment for the user they were made for until
// they expire; any change to them makes them unknown.
func TestDownloadLinks(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	now := time.Now()
	link := s.bs.DownloadURL("att", "user", now)
	_, query, _ := strings.Cut(link, "?")
	q := mustQuery(t, query)
	if u, err := s.bs.LinkUser("att", q, now.Add(blobs.LinkTTL)); err != nil || u != "user" {
		t.Fatalf("a fresh link: %q, %v", u, err)
	}
	if _, err := s.bs.LinkUser("att", q, now.Add(blobs.LinkTTL+6*time.Minute)); !errors.Is(err, blobs.ErrLinkExpired) {
		t.Fatalf("an expired link: %v", err)
	}
	for name, change := range map[string]func(){
		"other attachment": func() {},
		"other user":       func() { q.Set("u", "mallory") },
		"later expiry":     func() { q.Set("e", q.Get("e")+"0") },
		"no signature":     func() { q.Del("s") },
	} {
		q = mustQuery(t, query)
		change()
		id := "att"
		if name == "other attachment" {
			id = "att2"
		}
		if _, err := s.bs.LinkUser(id, q, now); errs.CodeOf(err) != errs.CodeNotFound {
			t.Errorf("%s: %v, want NOT_FOUND", name, err)
		}
	}
	if !bytes.Contains([]byte(link), []byte("/attachments/att?")) {
		t.Fatalf("link %s", link)
	}
}

func mustQuery(t *testing.T, s string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
