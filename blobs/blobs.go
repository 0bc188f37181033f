// Package blobs keeps the bytes of attachments in a blob store behind
// gocloud.dev/blob: a local directory by default, or S3 (and S3-compatible
// stores) and Azure by URL; GCS in binaries built with the tag gcsblob (see
// drivers.go for why). It streams uploads into the store while
// hashing them (Stage), discards what no attachment adopted (Release), opens
// blobs for downloads, signs download links, and sweeps garbage (Sweep).
//
// Objects are named at random under the deployment's prefix (a value the
// database holds, so two deployments sharing a bucket never see each other's
// objects): an object's SHA-256 is known only once its bytes are written, and
// object stores cannot rename. The database says which object is the blob of
// which content in a workspace, and which objects are garbage (store/blobs.go).
package blobs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gabriel-vasile/mimetype"
	"github.com/google/uuid"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"taskflow/store"
)

// Defaults of Options.
const (
	// DefaultMaxUploadSize is MAX_UPLOAD_SIZE's default: 25 MiB.
	DefaultMaxUploadSize = 25 << 20
	// DefaultQuota is WORKSPACE_STORAGE_QUOTA's default: 1 GiB per workspace.
	DefaultQuota = 1 << 30
	// DefaultSweepGrace is BLOB_SWEEP_GRACE's default: 1 hour.
	DefaultSweepGrace = time.Hour
)

// Options configure a Store.
type Options struct {
	// URL is the blob store (BLOB_URL): file:///dir, s3://bucket?region=...;
	// empty means DefaultDir.
	URL string
	DB  *store.DB
	// MaxUploadSize bounds the files of one request together
	// (MAX_UPLOAD_SIZE); 0 means DefaultMaxUploadSize.
	MaxUploadSize int64
	// Quota bounds a workspace's attachments (WORKSPACE_STORAGE_QUOTA); 0
	// means DefaultQuota, negative none.
	Quota int64
	// SweepGrace is how long an unfinished upload and an unused blob are kept
	// (BLOB_SWEEP_GRACE); 0 means DefaultSweepGrace.
	SweepGrace time.Duration
	Log        *slog.Logger
}

// Store is the blob store of a deployment.
type Store struct {
	bucket    *blob.Bucket
	db        *store.DB
	log       *slog.Logger
	where     string
	maxUpload int64
	quota     int64
	grace     time.Duration
	linkKey   []byte
}

// Names of the deployment's values in the database (store.ServerSecret).
const (
	secretLinks  = "download-links"
	secretPrefix = "blob-prefix"
)

// Open opens the blob store of o.URL under the deployment's prefix, and reads
// (or makes) the deployment's key of download links.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.MaxUploadSize <= 0 {
		o.MaxUploadSize = DefaultMaxUploadSize
	}
	if o.Quota == 0 {
		o.Quota = DefaultQuota
	}
	if o.SweepGrace <= 0 {
		o.SweepGrace = DefaultSweepGrace
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	bucket, where, err := openBucket(ctx, o.URL)
	if err != nil {
		return nil, err
	}
	prefix, err := o.DB.ServerSecret(ctx, secretPrefix, func() []byte { return []byte(uuid.NewString()) })
	if err != nil {
		bucket.Close()
		return nil, err
	}
	linkKey, err := o.DB.ServerSecret(ctx, secretLinks, func() []byte {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return b
	})
	if err != nil {
		bucket.Close()
		return nil, err
	}
	return &Store{bucket: blob.PrefixedBucket(bucket, string(prefix)+"/"), db: o.DB, log: o.Log,
		where: where + " (objects under " + string(prefix) + "/)", maxUpload: o.MaxUploadSize, quota: o.Quota,
		grace: o.SweepGrace, linkKey: linkKey}, nil
}

// openBucket opens the bucket of rawURL, or of DefaultDir when it is empty,
// and says where it is.
func openBucket(ctx context.Context, rawURL string) (*blob.Bucket, string, error) {
	if rawURL == "" {
		dir, err := DefaultDir()
		if err != nil {
			return nil, "", err
		}
		b, err := fileblob.OpenBucket(dir, &fileblob.Options{CreateDir: true, NoTempDir: true,
			Metadata: fileblob.MetadataDontWrite})
		if err != nil {
			return nil, "", fmt.Errorf("open the blob directory %s (set BLOB_URL to another?): %w", dir, err)
		}
		return b, dir, nil
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("BLOB_URL: %w%s", err, driverAdvice(rawURL))
	}
	return b, redact(rawURL), nil
}

// redact drops the query and any user information of a blob URL for logs.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable BLOB_URL)"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}

// DefaultDir is where attachments are kept when BLOB_URL is unset: the user's
// data directory ($XDG_DATA_HOME or ~/.local/share on Linux and BSDs,
// ~/Library/Application Support on macOS, %LocalAppData% on Windows), under
// taskflow/blobs: never the working directory, so `go run .` in a clone writes
// nothing into it.
func DefaultDir() (string, error) {
	var base string
	switch runtime.GOOS {
	case "windows":
		d, err := os.UserCacheDir() // %LocalAppData%
		if err != nil {
			return "", fmt.Errorf("no user data directory for attachments (set BLOB_URL): %w", err)
		}
		base = d
	case "darwin", "ios":
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory for attachments (set BLOB_URL): %w", err)
		}
		base = filepath.Join(home, "Library", "Application Support")
	default:
		if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
			base = d
		} else {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("no home directory for attachments (set BLOB_URL): %w", err)
			}
			base = filepath.Join(home, ".local", "share")
		}
	}
	return filepath.Join(base, "taskflow", "blobs"), nil
}

// Where describes the store for logs, without secrets.
func (s *Store) Where() string { return s.where }

// MaxUploadSize is the most the files of one request may hold together.
func (s *Store) MaxUploadSize() int64 { return s.maxUpload }

// Quota is the most a workspace's attachments may hold (<= 0: no bound).
func (s *Store) Quota() int64 { return s.quota }

// Close closes the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// Errors of Stage that are the client's: a file over its limit, a body that
// could not be read (the client went away, a malformed part).
var (
	ErrTooLarge = errors.New("blobs: the file is larger than the limit")
	ErrRead     = errors.New("blobs: the file could not be read")
)

// sniffLen is how much of a file the content type is sniffed from
// (mimetype's default read limit).
const sniffLen = 3072

// Stage streams r into a new object of the store while hashing it, and
// returns the file: its key, size, SHA-256 and the content type sniffed from
// its first bytes, with filename cleaned (store.CleanFilename). The object is
// registered before its first byte is written, so the sweeper spares it for
// the grace period. It reads at most limit+1 bytes and returns ErrTooLarge
// when r holds more than limit, and ErrRead (wrapping r's error) when reading
// fails (a client that went away); any other error is the store's or the
// database's. Nothing is left behind on an error. The caller Releases the
// file once the operation that may adopt it is over.
func (s *Store) Stage(ctx context.Context, r io.Reader, filename string, limit int64) (*store.UploadedFile, error) {
	f := &store.UploadedFile{Key: uuid.NewString(), Filename: store.CleanFilename(filename)}
	if err := s.db.RegisterBlobUpload(ctx, f.Key); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.bucket.NewWriter(wctx, f.Key, &blob.WriterOptions{DisableContentTypeDetection: true, MaxConcurrency: 1})
	if err != nil {
		s.forget(ctx, f.Key)
		return nil, fmt.Errorf("blobs: write %s: %w", f.Key, err)
	}
	h := sha256.New()
	head := make([]byte, 0, sniffLen)
	buf := make([]byte, 32<<10)
	lr := &io.LimitedReader{R: r, N: limit + 1}
	var copyErr error
	for {
		n, err := lr.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if room := sniffLen - len(head); room > 0 {
				head = append(head, chunk[:min(room, n)]...)
			}
			h.Write(chunk)
			f.Size += int64(n)
			if _, werr := w.Write(chunk); werr != nil {
				copyErr = fmt.Errorf("blobs: write %s: %w", f.Key, werr)
				break
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			copyErr = fmt.Errorf("%w: %w", ErrRead, err)
			break
		}
	}
	if copyErr == nil && f.Size > limit {
		copyErr = ErrTooLarge
	}
	if copyErr != nil {
		cancel() // aborts the write: the object is not created
		_ = w.Close()
		s.discard(ctx, f.Key)
		return nil, copyErr
	}
	if err := w.Close(); err != nil {
		s.discard(ctx, f.Key)
		return nil, fmt.Errorf("blobs: write %s: %w", f.Key, err)
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	f.ContentType = mimetype.Detect(head).String()
	return f, nil
}

// Release deletes a staged file's object unless an attachment adopted it (its
// registration went with the adoption's commit): a failed operation, a
// replayed one, or content the workspace had already. A failure is logged
// (at FailureLevel); the sweeper removes what is left after the grace period.
func (s *Store) Release(ctx context.Context, f *store.UploadedFile) {
	ctx = context.WithoutCancel(ctx)
	adopted, err := s.db.BlobReferenced(ctx, f.Key)
	if err != nil {
		s.log.Log(ctx, FailureLevel(err), "blobs: could not tell whether an upload was adopted; the sweeper will", "key", f.Key, "err", err)
		return
	}
	if !adopted {
		s.discard(ctx, f.Key)
	}
}

// discard deletes an object that nothing adopted, then its registration (in
// that order: a crash in between leaves a registration, which the sweeper
// expires, not an object nobody knows).
func (s *Store) discard(ctx context.Context, key string) {
	ctx = context.WithoutCancel(ctx)
	if err := s.delete(ctx, key); err != nil {
		s.log.Log(ctx, FailureLevel(err), "blobs: could not delete an object nothing uses; the sweeper will", "key", key, "err", err)
		return
	}
	s.forget(ctx, key)
}

// forget deletes the registration of key (its object does not exist).
func (s *Store) forget(ctx context.Context, key string) {
	if err := s.db.ForgetBlobUpload(context.WithoutCancel(ctx), key); err != nil {
		s.log.Log(ctx, FailureLevel(err), "blobs: could not forget an upload; the sweeper will", "key", key, "err", err)
	}
}

// delete deletes the object key; one that does not exist is deleted already
// (missing: not one the store refuses to show).
func (s *Store) delete(ctx context.Context, key string) error {
	if err := s.bucket.Delete(ctx, key); err != nil && !missing(err) {
		return err
	}
	return nil
}

// NewReader opens the object key for reading; its Seek lets http.ServeContent
// answer range requests without reading what comes before the range.
func (s *Store) NewReader(ctx context.Context, key string) (*blob.Reader, error) {
	return s.bucket.NewReader(ctx, key, nil)
}

// NewWriter opens the object key for writing (an audit export's file): the
// object appears whole when the writer is closed, and not at all when ctx is
// cancelled before; a write to an existing key replaces it. The database
// must know key before the first byte is written (store's UnknownBlobs),
// or the sweeper deletes the object.
func (s *Store) NewWriter(ctx context.Context, key, contentType string) (*blob.Writer, error) {
	return s.bucket.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType, MaxConcurrency: 1})
}

// Delete deletes the object key; one that does not exist is deleted already.
func (s *Store) Delete(ctx context.Context, key string) error { return s.delete(ctx, key) }

// Exists reports whether the object key exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	return s.bucket.Exists(ctx, key)
}

// Keys returns the keys of every object of the deployment (tests and tools;
// the sweeper pages through them), listed as eachObject lists them.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	var keys []string
	err := s.eachObject(ctx, func() { keys = keys[:0] }, func(obj *blob.ListObject) error {
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// eachObject calls visit with each object of the deployment, in key order,
// until visit returns an error, which it returns. A listing that meets an
// object deleted while it lists (fileblob stats each file it walks: an
// upload's temporary file removed meanwhile is NotFound) starts again from
// the first key, at most five times in all, after a call of restart: visit
// may then see again objects it saw before the restart. Another failure of
// the listing, or a fifth NotFound, is returned.
func (s *Store) eachObject(ctx context.Context, restart func(), visit func(*blob.ListObject) error) error {
	for try := 1; ; try++ {
		vanished, err := s.listOnce(ctx, visit)
		if !vanished || try == 5 {
			return err
		}
		restart()
	}
}

// listOnce is one listing of eachObject; vanished reports that the listing
// failed because an object it met was deleted (NotFound).
func (s *Store) listOnce(ctx context.Context, visit func(*blob.ListObject) error) (vanished bool, err error) {
	it := s.bucket.List(nil)
	for {
		obj, err := it.Next(ctx)
		// The end of the listing is io.EOF itself: a failure may wrap one
		// (the AWS SDK's "request send failed ...: EOF", a connection
		// dropped), which errors.Is took for the end, and the sweep ended
		// there without a word.
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return missing(err), err
		}
		if err := visit(obj); err != nil {
			return false, err
		}
	}
}

// driverAdvice says how to get a blob store driver this binary lacks.
func driverAdvice(rawURL string) string {
	scheme, _, _ := strings.Cut(rawURL, "://")
	switch scheme {
	case "gs":
		if !hasGCS {
			return " (this binary was built without Google Cloud Storage: build it with `go build -tags gcsblob`)"
		}
	}
	return ""
}
