package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"taskflow/auditexport"
	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
)

// flakyS3 is an S3 server in the test process (gofakes3, spoken to over HTTP
// by the AWS SDK of the S3 driver) that a test makes fail for a while, as a
// real one does: an answer 5xx (503 SlowDown, 500 InternalError), a
// connection dropped before any answer, or a refusal that is the operator's
// to fix (403 AccessDenied, 404 NoSuchBucket).
type flakyS3 struct {
	srv  *httptest.Server
	fail atomic.Pointer[s3Failure] // nil: the server answers
}

// s3Failure is how flakyS3 fails: an S3 error answer of status with the
// error code, or, with status 0, every connection closed unanswered.
type s3Failure struct {
	status int
	code   string
}

// String names the failure in a test's messages.
func (f s3Failure) String() string {
	if f.status == 0 {
		return "connection dropped"
	}
	return fmt.Sprintf("%d %s", f.status, f.code)
}

// newFlakyS3 starts a flakyS3 with the bucket "attachments", answering.
func newFlakyS3(t *testing.T) *flakyS3 {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("attachments"); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	s := &flakyS3{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := s.fail.Load()
		switch {
		case f == nil:
			fake.ServeHTTP(w, r)
		case f.status == 0:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(f.status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>failing</Message></Error>`, f.code)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// url is the BLOB_URL of the bucket, as an operator writes it for an
// S3-compatible store (anonymous: gofakes3 checks no signature).
func (s *flakyS3) url() string {
	return "s3://attachments?region=us-east-1&use_path_style=true&disable_https=true&anonymous=true&endpoint=" + s.srv.URL
}

// failWith makes every request fail as f says, until answer.
func (s *flakyS3) failWith(f s3Failure) { s.fail.Store(&f) }

// answer makes the server answer again.
func (s *flakyS3) answer() { s.fail.Store(nil) }

// The failures of the moment of an S3 store, and the refusals that are not.
var (
	s3Transient = []s3Failure{{503, "SlowDown"}, {500, "InternalError"}, {0, ""}}
	s3Permanent = []s3Failure{{403, "AccessDenied"}, {404, "NoSuchBucket"}}
)

// s3Refusals are the refusals of s3Permanent that a deletion meets: a
// bucket missing holds no object, deleted already.
var s3Refusals = []s3Failure{{403, "AccessDenied"}, {403, "SignatureDoesNotMatch"}}

// withS3 returns the options of an Env logging as JSON to logs (its blob
// store too), whose attachments are in s, kept for the sweep grace period
// grace (0: the default).
func withS3(t *testing.T, s *flakyS3, logs *syncBuffer, grace time.Duration) []apitest.Option {
	log := slog.New(slog.NewJSONHandler(logs, nil))
	return []apitest.Option{
		func(o *httpapi.Options) { o.Log = log },
		apitest.WithBlobs(t, func(o *blobs.Options) { o.URL, o.SweepGrace, o.Log = s.url(), grace, log }),
	}
}

// levels returns the level of every record logged with the message msg.
func (s *syncBuffer) levels(t *testing.T, msg string) []string {
	t.Helper()
	var out []string
	for _, l := range s.lines(t) {
		if l["msg"] == msg {
			out = append(out, fmt.Sprint(l["level"]))
		}
	}
	return out
}

// wantLevel is the level a background task logs a failure f of the blob
// store at, which its next pass retries: WARN for a failure of the moment,
// ERROR for a refusal that is the operator's to fix (blobs.FailureLevel).
func wantLevel(f s3Failure) string {
	if f.status == 403 || f.status == 404 {
		return "ERROR"
	}
	return "WARN"
}

// expectUnavailable fails unless r is 503 UNAVAILABLE with Retry-After: 1 and
// retryAfter 1, and its request id is logged at WARN, never at ERROR.
func expectUnavailable(t *testing.T, what string, r *apitest.Response, logs *syncBuffer, reqID string) {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Header.Get("Retry-After") != "1" ||
		retryAfter(r) != 1 {
		t.Errorf("%s: HTTP %d %s Retry-After %q, want 503 UNAVAILABLE 1: %s", what, r.Status, r.Code(),
			r.Header.Get("Retry-After"), r.Raw)
	}
	levels := logs.warnings(t, reqID)
	if len(levels) == 0 || strings.Contains(strings.Join(levels, " "), "ERROR") {
		t.Errorf("%s: logged %v, want WARN and no ERROR", what, levels)
	}
}

// A download of an attachment while the S3 store fails for the moment (an
// answer 5xx, a dropped connection) is 503 UNAVAILABLE with Retry-After,
// logged at WARN, and the same download succeeds once the store answers; a
// store that refuses for good (access denied, no such bucket: the operator's
// to fix) is 500 INTERNAL, logged at ERROR.
func TestAttachmentDownloadWhileTheBlobStoreFails(t *testing.T) {
	t.Parallel()
	s3 := newFlakyS3(t)
	var logs syncBuffer
	e := newFilesEnv(t, withS3(t, s3, &logs, 0)...)
	content := []byte(strings.Repeat("0123456789", 1000))
	a := attached(t, e.upload(t, e.member, e.task, "digits.txt", content, ""))
	path := blobs.DownloadPath(a.ID)
	for i, f := range s3Transient {
		s3.failWith(f)
		reqID := fmt.Sprintf("req-download-%d", i)
		r := send(t, e.Env, http.MethodGet, path, e.member.Token, "X-Request-ID", reqID)
		expectUnavailable(t, f.String(), r, &logs, reqID)
		s3.answer()
		if r := send(t, e.Env, http.MethodGet, path, e.member.Token); r.Status != http.StatusOK || !bytes.Equal(r.Raw, content) {
			t.Errorf("%s: once the store answers: %d %.200s", f, r.Status, r.Raw)
		}
	}
	for i, f := range s3Permanent {
		s3.failWith(f)
		reqID := fmt.Sprintf("req-refused-%d", i)
		r := send(t, e.Env, http.MethodGet, path, e.member.Token, "X-Request-ID", reqID)
		if r.Status != http.StatusInternalServerError || r.Code() != "INTERNAL" {
			t.Errorf("%s: HTTP %d %s, want 500 INTERNAL: %s", f, r.Status, r.Code(), r.Raw)
		}
		if levels := logs.warnings(t, reqID); !strings.Contains(strings.Join(levels, " "), "ERROR") {
			t.Errorf("%s: logged %v, want ERROR", f, levels)
		}
	}
}

// The file of an audit export, likewise: 503 UNAVAILABLE while the store
// fails for the moment, the file once it answers.
func TestAuditExportDownloadWhileTheBlobStoreFails(t *testing.T) {
	t.Parallel()
	s3 := newFlakyS3(t)
	var logs syncBuffer
	e := &exportEnv{auditEnv: newAuditEnv(t, withS3(t, s3, &logs, 0)...)}
	for i := range 5 {
		e.event(t, e.ws, e.owner, "task.created", uuidFor(i), nil)
	}
	x, r := e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": "NDJSON"}, nil)
	if x == nil {
		t.Fatalf("start: %s", r.Raw)
	}
	if err := e.worker(auditexport.Options{}).Work(t.Context(), e.job(t, x.ID, 1)); err != nil {
		t.Fatalf("work: %v", err)
	}
	got, r := e.get(t, e.admin, x.ID)
	if got == nil || got.State != "SUCCEEDED" || got.DownloadURL == nil {
		t.Fatalf("after the run: %s", r.Raw)
	}
	file := e.download(t, *got.DownloadURL, e.admin.Token)
	if file.Status != http.StatusOK || len(file.Raw) != got.Bytes || got.Bytes == 0 {
		t.Fatalf("download: %d, %d bytes (bytes %d): %.300s", file.Status, len(file.Raw), got.Bytes, file.Raw)
	}
	for i, f := range s3Transient {
		s3.failWith(f)
		reqID := fmt.Sprintf("req-export-%d", i)
		expectUnavailable(t, f.String(), e.download(t, *got.DownloadURL, e.admin.Token, "X-Request-ID", reqID), &logs, reqID)
		s3.answer()
		if again := e.download(t, *got.DownloadURL, e.admin.Token); again.Status != http.StatusOK || !bytes.Equal(again.Raw, file.Raw) {
			t.Errorf("%s: once the store answers: %d %.200s", f, again.Status, again.Raw)
		}
	}
}

// An upload whose file cannot be stored for the moment is UNAVAILABLE with
// Retry-After, logged at WARN, and loses nothing: no attachment, no blob, and
// what it left (a registration whose object could not be deleted either) is
// swept; its idempotency key was not taken, so the same retry, once the store
// answers, attaches the file, once.
func TestUploadWhileTheBlobStoreFails(t *testing.T) {
	t.Parallel()
	s3 := newFlakyS3(t)
	var logs syncBuffer
	// Every registration is older than the grace period by the sweep.
	e := newFilesEnv(t, withS3(t, s3, &logs, time.Millisecond)...)
	for i, f := range s3Transient {
		content := []byte(fmt.Sprintf("the file of try %d", i))
		key := fmt.Sprintf("upload-%d", i)
		reqID := fmt.Sprintf("req-upload-%d", i)
		s3.failWith(f)
		r := e.upload(t, e.member, e.task, "notes.txt", content, key, "X-Request-ID", reqID)
		expectUnavailable(t, f.String(), r, &logs, reqID)
		if string(r.Body.Data) != "" && string(r.Body.Data) != "null" {
			t.Errorf("%s: data %s", f, r.Body.Data)
		}
		s3.answer()
		// The file's registration is left when its object could not be
		// deleted either (the store still failing): the sweep's to expire.
		if a, b, _, o := e.stored(t); a != i || b != i || o != i {
			t.Errorf("%s: stored %d attachments, %d blobs, %d objects after the failure; want %d each", f, a, b, o, i)
		}
		time.Sleep(2 * time.Millisecond) // the grace period
		if _, err := e.Blobs.Sweep(t.Context(), time.Now()); err != nil {
			t.Fatal(err)
		}
		e.expectStored(t, i, i, 0, i)
		first := attached(t, e.upload(t, e.member, e.task, "notes.txt", content, key))
		again := attached(t, e.upload(t, e.member, e.task, "notes.txt", content, key))
		if first.ID != again.ID || first.SHA256 != hexSHA(content) {
			t.Errorf("%s: the retries attached %s and %s (sha256 %s)", f, first.ID, again.ID, first.SHA256)
		}
		e.expectStored(t, i+1, i+1, 0, i+1)
	}
}

// The sweeper, when the store fails, logs "blob sweep failed" at WARN for a
// failure of the moment (the next sweep retries it: no page) and at ERROR
// for a refusal that is the operator's to fix (access denied, the bucket
// missing: every sweep fails so until then).
func TestBlobSweepFailureIsLoggedByItsKind(t *testing.T) {
	t.Parallel()
	s3 := newFlakyS3(t)
	var logs syncBuffer
	e := newFilesEnv(t, withS3(t, s3, &logs, time.Millisecond)...) // a sweep every second
	const msg = "blob sweep failed; the next one goes on"
	for _, f := range append(append([]s3Failure{}, s3Transient...), s3Permanent...) {
		before := len(logs.levels(t, msg))
		s3.failWith(f)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Blobs.RunSweeper(ctx)
		}()
		deadline := time.Now().Add(60 * time.Second)
		for len(logs.levels(t, msg)) == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		<-done
		s3.answer()
		got := logs.levels(t, msg)[before:]
		if len(got) == 0 || got[0] != wantLevel(f) {
			t.Errorf("%s: the sweep logged %v, want %s", f, got, wantLevel(f))
		}
	}
}

// A file released after its request (Release: the request failed, or
// the workspace had the content already) whose object cannot be deleted is
// left to the sweeper, logged at WARN when the store fails for the moment
// and at ERROR when it refuses.
func TestReleaseFailureIsLoggedByItsKind(t *testing.T) {
	t.Parallel()
	s3 := newFlakyS3(t)
	var logs syncBuffer
	e := newFilesEnv(t, withS3(t, s3, &logs, 0)...)
	const msg = "blobs: could not delete an object nothing uses; the sweeper will"
	for i, f := range append(append([]s3Failure{}, s3Transient...), s3Refusals...) {
		file, err := e.Blobs.Stage(t.Context(), strings.NewReader(fmt.Sprint("never attached ", i)), "a.txt", 100)
		if err != nil {
			t.Fatal(err)
		}
		before := len(logs.levels(t, msg))
		s3.failWith(f)
		e.Blobs.Release(t.Context(), file)
		s3.answer()
		if got := logs.levels(t, msg)[before:]; len(got) != 1 || got[0] != wantLevel(f) {
			t.Errorf("%s: the release logged %v, want one %s", f, got, wantLevel(f))
		}
	}
}

// The expiry of audit exports, when the file of an export it expired cannot
// be deleted (left to the sweeper; the next pass goes on), logs "audit
// export expiry" at WARN for a failure of the moment of the store and at
// ERROR when it refuses: it was ERROR for both, paging for an S3 503.
func TestAuditExportExpiryFailureIsLoggedByItsKind(t *testing.T) {
	t.Parallel()
	s3 := newFlakyS3(t)
	var logs syncBuffer
	e := &exportEnv{auditEnv: newAuditEnv(t, withS3(t, s3, &logs, 0)...)}
	w := auditexport.NewWorker(auditexport.Options{DB: e.DB, Blobs: e.Blobs, Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	const msg = "audit export expiry"
	for _, f := range append(append([]s3Failure{}, s3Transient...), s3Refusals[0]) {
		x, r := e.start(t, e.admin, map[string]any{"workspaceId": e.ws, "format": "NDJSON"}, nil)
		if x == nil {
			t.Fatalf("start: %s", r.Raw)
		}
		if err := w.Work(t.Context(), e.job(t, x.ID, 1)); err != nil {
			t.Fatalf("work: %v", err)
		}
		e.exec(t, `UPDATE audit_exports SET expires_at = now() - interval '1 second' WHERE id = $1`, x.ID)
		before := len(logs.levels(t, msg))
		s3.failWith(f)
		_, err := w.Expire(t.Context())
		s3.answer()
		if err == nil {
			t.Errorf("%s: the expiry deleted the file", f)
		}
		if got := logs.levels(t, msg)[before:]; len(got) != 1 || got[0] != wantLevel(f) {
			t.Errorf("%s: the expiry logged %v, want one %s", f, got, wantLevel(f))
		}
	}
}
