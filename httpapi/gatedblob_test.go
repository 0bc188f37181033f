package httpapi_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/gcerrors"
)

// A blob store whose writes a test holds: gatedfile:///dir?gate=NAME is the
// fileblob bucket of dir, whose writers pass the first gate.pass writes and
// then block until the test opens the gate (or their context ends), as on a
// blob store that stopped answering. It stands for an instance stuck, or
// dead, in the middle of a file: nothing of the run goes on, not even its
// heartbeat, and no context is cancelled.

// gate holds the writes of the buckets opened with its name.
type gate struct {
	pass    int           // writes that pass before the gate holds them
	open    chan struct{} // closed: every write passes
	mu      sync.Mutex
	writes  int
	held    chan struct{} // closed when a write is first held
	commits []string      // keys whose writer closed with its object made
}

var (
	gatesMu sync.Mutex
	gates   = map[string]*gate{}
)

func init() {
	blob.DefaultURLMux().RegisterBucket("gatedfile", gatedOpener{})
}

// newGate returns a gate, and the URL of a gated bucket of dir.
func newGate(t *testing.T, dir string, pass int) (*gate, string) {
	g := &gate{pass: pass, open: make(chan struct{}), held: make(chan struct{})}
	gatesMu.Lock()
	gates[t.Name()] = g
	gatesMu.Unlock()
	t.Cleanup(func() {
		gatesMu.Lock()
		delete(gates, t.Name())
		gatesMu.Unlock()
		g.release()
	})
	return g, "gatedfile://" + dir + "?gate=" + url.QueryEscape(t.Name())
}

// release opens the gate: the writes held, and all later ones, go on.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// committed returns the keys whose object a writer made.
func (g *gate) committed() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.commits...)
}

// wait lets a write go on, or holds it until the gate opens or ctx ends.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	g.writes++
	if g.writes <= g.pass {
		g.mu.Unlock()
		return nil
	}
	select {
	case <-g.held:
	default:
		close(g.held)
	}
	g.mu.Unlock()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type gatedOpener struct{}

func (gatedOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	gatesMu.Lock()
	g := gates[u.Query().Get("gate")]
	gatesMu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("gatedfile: no gate %q", u.Query().Get("gate"))
	}
	b, err := fileblob.OpenBucket(u.Path, &fileblob.Options{NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
	if err != nil {
		return nil, err
	}
	return blob.NewBucket(&gatedBucket{b: b, g: g}), nil
}

// gatedBucket is a driver.Bucket over a portable bucket, with gated writes;
// what the worker of an export does not use is unimplemented.
type gatedBucket struct {
	b *blob.Bucket
	g *gate
}

var errUnimplemented = fmt.Errorf("gatedfile: unimplemented")

func (b *gatedBucket) ErrorCode(err error) gcerrors.ErrorCode {
	if err == errUnimplemented {
		return gcerrors.Unimplemented
	}
	return gcerrors.Code(err)
}
func (b *gatedBucket) As(any) bool             { return false }
func (b *gatedBucket) ErrorAs(error, any) bool { return false }
func (b *gatedBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, ModTime: a.ModTime, Size: a.Size, ETag: a.ETag}, nil
}
func (b *gatedBucket) ListPaged(context.Context, *driver.ListOptions) (*driver.ListPage, error) {
	return nil, errUnimplemented
}
func (b *gatedBucket) NewRangeReader(context.Context, string, int64, int64, *driver.ReaderOptions) (driver.Reader, error) {
	return nil, errUnimplemented
}
func (b *gatedBucket) Copy(context.Context, string, string, *driver.CopyOptions) error {
	return errUnimplemented
}
func (b *gatedBucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	return b.b.Delete(ctx, key)
}
func (b *gatedBucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errUnimplemented
}
func (b *gatedBucket) Close() error { return b.b.Close() }

func (b *gatedBucket) NewTypedWriter(ctx context.Context, key, contentType string, _ *driver.WriterOptions) (driver.Writer, error) {
	w, err := b.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType})
	if err != nil {
		return nil, err
	}
	return &gatedWriter{ctx: ctx, w: w, key: key, g: b.g}, nil
}

// gatedWriter passes the writes the gate lets through.
type gatedWriter struct {
	ctx context.Context
	w   *blob.Writer
	key string
	g   *gate
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if err := w.g.wait(w.ctx); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}

func (w *gatedWriter) Close() error {
	err := w.w.Close()
	if err == nil && w.ctx.Err() == nil {
		w.g.mu.Lock()
		w.g.commits = append(w.g.commits, strings.TrimPrefix(w.key, "/"))
		w.g.mu.Unlock()
	}
	return err
}
