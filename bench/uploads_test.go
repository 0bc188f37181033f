package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
)

// BenchmarkUploadMemory measures the peak resident memory of this process
// (VmHWM, reset before each run) while 10 clients upload 25 MiB each at once,
// through three designs of the upload path, each ending with the bytes in a
// fileblob bucket:
//
//   - streaming: TaskFlow's transport (httpapi), each file part streamed into
//     the blob store while hashed, the whole API behind it;
//   - gqlgen-memory: gqlgen's transport.MultipartForm with its defaults, which
//     reads a file whole into memory when the request is under MaxMemory
//     (32 MiB), then a resolver copies it into the bucket;
//   - gqlgen-tempfile: the same with MaxMemory 1 byte, so files go to temporary
//     files first and are copied into the bucket from there (every byte
//     written to disk twice).
//
// Run one at a time, so that one design's freed memory does not hide
// another's: go test ./bench -run '^$' -bench 'UploadMemory/streaming' -benchtime 1x
// (docs/decisions/2026-12-01-upload-streaming.md has the numbers).
func BenchmarkUploadMemory(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	const clients, size = 10, 25 << 20
	b.Run("streaming", func(b *testing.B) {
		env := apitest.New(b, func(o *httpapi.Options) {
			o.Blobs = apitest.OpenBlobs(b, o.DB, func(bo *blobs.Options) { bo.Quota = -1 })
		})
		owner := env.NewUser(b, "owner")
		task := env.NewTask(b, owner, "OWNER")
		measureUploads(b, clients, size, func(i int) error {
			body, ctype, n := apitest.Multipart(`mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id } }`,
				map[string]any{"t": task, "f": nil}, apitest.File{Path: "f", Name: "f", Size: size, Body: apitest.Pattern(i, size)})
			return post(env.Server.URL+"/query", body, ctype, n, "Bearer "+owner.Token)
		})
	})
	for name, maxMemory := range map[string]int64{"gqlgen-memory": 0, "gqlgen-tempfile": 1} {
		b.Run(name, func(b *testing.B) {
			bucket, err := fileblob.OpenBucket(b.TempDir(), &fileblob.Options{NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
			if err != nil {
				b.Fatal(err)
			}
			defer bucket.Close()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				transport.MultipartForm{MaxUploadSize: 2 * size, MaxMemory: maxMemory}.Do(w, r, copyingExecutor{bucket})
			}))
			defer srv.Close()
			measureUploads(b, clients, size, func(i int) error {
				body, ctype, n := apitest.Multipart(`mutation($f: Upload!) { f(file: $f) }`, map[string]any{"f": nil},
					apitest.File{Path: "f", Name: "f", Size: size, Body: apitest.Pattern(i, size)})
				return post(srv.URL, body, ctype, n, "")
			})
		})
	}
}

// measureUploads runs clients uploads at once, b.N times, and reports the
// peak RSS over the RSS before them.
func measureUploads(b *testing.B, clients int, size int64, upload func(i int) error) {
	b.Helper()
	runtime.GC()
	idle, err := apitest.ProcStatus("self", "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	if err := apitest.ResetPeakRSS("self"); err != nil {
		b.Skipf("cannot reset the peak RSS: %v", err)
	}
	b.SetBytes(int64(clients) * size)
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for i := range clients {
			wg.Go(func() { errs <- upload(i) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	peak, err := apitest.ProcStatus("self", "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(idle)/(1<<20), "idle-MiB")
	b.ReportMetric(float64(peak-idle)/(1<<20), "peak-over-idle-MiB")
}

// post sends a multipart body and fails on anything but a 200 without errors.
func post(url string, body io.Reader, ctype string, n int64, authorization string) error {
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return err
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("GraphQL-Preflight", "1")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || strings.Contains(string(out), `"errors"`) {
		return fmt.Errorf("HTTP %d %s", res.StatusCode, out)
	}
	return nil
}

// copyingExecutor stands in for gqlgen's executor: it runs every operation
// as a resolver taking an Upload would, copying each file of the variables
// into the bucket.
type copyingExecutor struct{ bucket *blob.Bucket }

// CreateOperationContext accepts the operation.
func (x copyingExecutor) CreateOperationContext(_ context.Context, p *graphql.RawParams) (*graphql.OperationContext, gqlerror.List) {
	return &graphql.OperationContext{RawQuery: p.Query, Variables: p.Variables}, nil
}

// DispatchOperation copies the files into the bucket.
func (x copyingExecutor) DispatchOperation(ctx context.Context, oc *graphql.OperationContext) (graphql.ResponseHandler, context.Context) {
	var err error
	for _, v := range oc.Variables {
		if up, ok := v.(graphql.Upload); ok && err == nil {
			err = x.bucket.Upload(ctx, filepath.Base(uuid.NewString()), up.File, &blob.WriterOptions{ContentType: "application/octet-stream"})
		}
	}
	return func(context.Context) *graphql.Response {
		if err != nil {
			return &graphql.Response{Errors: gqlerror.List{gqlerror.Errorf("%v", err)}}
		}
		return &graphql.Response{Data: []byte(`{"f":true}`)}
	}, ctx
}

// DispatchError answers errors.
func (x copyingExecutor) DispatchError(_ context.Context, list gqlerror.List) *graphql.Response {
	return &graphql.Response{Errors: list}
}
