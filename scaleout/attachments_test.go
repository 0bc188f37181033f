package scaleout_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
	"taskflow/store/storetest"
)

// uploadQuery attaches $f to $t.
const uploadQuery = `mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id sha256 size } }`

// upload sends addAttachment of the file to the instance and decodes the answer.
func (in *instance) upload(token, task string, f apitest.File) (*response, error) {
	body, ctype, n := apitest.Multipart(uploadQuery, map[string]any{"t": task, "f": nil}, f)
	req, err := http.NewRequest(http.MethodPost, in.url+"/query", body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("GraphQL-Preflight", "1")
	req.Header.Set("Authorization", "Bearer "+token)
	return do(req)
}

// newTask creates a task through the API and returns its id.
func newTask(t testing.TB, in *instance, token string) string {
	t.Helper()
	project := newProject(t, in, token)
	r := in.mustPost(t, token, createTask, taskVars(project, 0))
	return r.field("createTask")["id"].(string)
}

// filesIn lists the regular files under dir.
func filesIn(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A server SIGKILLed after an upload's bytes are going into the blob store
// and before its attachment commits leaves no attachment and a registered
// object; the server started again keeps every committed attachment's bytes
// and its sweeper deletes the orphan once BLOB_SWEEP_GRACE (shortened here, as
// an operator may) has passed. The upload is held between the two by its own
// body, which stalls halfway, so the kill lands there and nowhere else.
func TestSIGKILLBetweenBlobAndRow(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	dir := t.TempDir()
	in := newInstance(t, "DATABASE_URL="+dbURL, "BLOB_URL=file://"+dir+"?no_tmp_dir=true&metadata=skip", "BLOB_SWEEP_GRACE=2s")
	in.start()
	_, token := newUser(t, pool, "ann")
	task := newTask(t, in, token)
	kept, err := in.upload(token, task, apitest.File{Path: "f", Name: "kept.bin", Size: 200 << 10, Body: apitest.Pattern(0, 200<<10)})
	if err != nil || kept.code() != "" {
		t.Fatalf("upload: %v %v", kept, err)
	}
	keptID := kept.field("addAttachment")["id"].(string)
	if got := filesIn(t, dir); len(got) != 1 {
		t.Fatalf("files %v, want the kept one", got)
	}

	// Hold the upload after the first half of its bytes is stored: its
	// body stalls there, so the kill lands between the blob and the row. (A
	// kill once the upload's unit of work is sent changes nothing of this:
	// the unit of work, COMMIT included, is at Postgres in one round trip,
	// and commits or not as a whole: then the attachment holds the bytes.)
	stall := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		body := io.MultiReader(apitest.Pattern(0, 512<<10), stalled(stall))
		_, _ = in.upload(token, task, apitest.File{Path: "f", Name: "lost.bin", Size: 1 << 20, Body: body})
	}()
	waited := false
	for range 2000 { // a readiness poll, not a timing assertion
		if len(filesIn(t, dir)) == 2 && count(t, pool, `SELECT count(*) FROM blob_uploads`) == 1 {
			waited = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !waited {
		t.Fatalf("the upload's bytes were never being stored: files %v\n%s", filesIn(t, dir), in.stderr)
	}
	in.signalKill()
	close(stall)
	<-sent
	if n := count(t, pool, `SELECT count(*) FROM attachments`); n != 1 {
		t.Fatalf("%d attachments after the kill, want the kept one", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM blob_uploads`); n != 1 {
		t.Fatalf("%d registered uploads after the kill, want the lost one", n)
	}
	if got := filesIn(t, dir); len(got) != 2 {
		t.Fatalf("files %v after the kill, want the kept and the lost one", got)
	}

	in.start()
	swept := false
	for range 600 { // the sweeper runs every second once the grace period is over
		if len(filesIn(t, dir)) == 1 && count(t, pool, `SELECT count(*) FROM blob_uploads`) == 0 {
			swept = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !swept {
		t.Fatalf("the orphan was not swept: files %v\n%s", filesIn(t, dir), in.stderr)
	}
	code, body, err := in.getAs(token, "/attachments/"+keptID)
	if err != nil || code != http.StatusOK || int64(len(body)) != 200<<10 {
		t.Fatalf("the kept attachment: %d, %d bytes, %v", code, len(body), err)
	}
	// Every attachment's blob exists.
	rows, err := pool.Query(context.Background(), `SELECT b.key FROM attachments a JOIN attachment_blobs b USING (workspace_id, sha256)`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := collectStrings(rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(filesIn(t, dir)[0], k) {
			t.Fatalf("attachment blob %s is not among %v", k, filesIn(t, dir))
		}
	}
}

// stalled returns a reader that blocks until release is closed, then ends.
func stalled(release <-chan struct{}) io.Reader {
	return readerFunc(func([]byte) (int, error) {
		<-release
		return 0, io.ErrUnexpectedEOF
	})
}

// readerFunc is a function as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// getAs fetches a path of the instance with a bearer token.
func (in *instance) getAs(token, path string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, in.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// collectStrings reads one text column of rows.
func collectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Ten concurrent uploads of 25 MiB (the default MAX_UPLOAD_SIZE) keep the
// server's peak resident memory within 50 MiB of its idle RSS: files stream
// into the blob store, never whole in memory. The peak is the kernel's
// high-water mark (VmHWM), reset once the server is idle, so no spike between
// two samples is missed.
func TestUploadsStreamWithinMemoryBound(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	dir := t.TempDir()
	in := newInstance(t, "DATABASE_URL="+dbURL, "BLOB_URL=file://"+dir+"?no_tmp_dir=true&metadata=skip",
		"WORKSPACE_STORAGE_QUOTA=0", "RATE_LIMIT_POINTS=100000")
	in.start()
	_, token := newUser(t, pool, "ann")
	task := newTask(t, in, token)
	// Warm up: the paths of an upload have run once.
	if r, err := in.upload(token, task, apitest.File{Path: "f", Name: "warm", Size: 1 << 20, Body: apitest.Pattern(0, 1<<20)}); err != nil || r.code() != "" {
		t.Fatalf("warm-up: %v %v", r, err)
	}
	pid := strconv.Itoa(in.cmd.Process.Pid)
	idle, err := apitest.ProcStatus(pid, "VmRSS")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if err := apitest.ResetPeakRSS(pid); err != nil {
		t.Skipf("cannot reset the peak RSS of the server: %v", err)
	}
	const n, size = 10, 25 << 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			r, err := in.upload(token, task, apitest.File{Path: "f", Name: fmt.Sprintf("big-%d", i), Size: size,
				Body: apitest.Pattern(i, size)})
			if err == nil && r.code() != "" {
				err = fmt.Errorf("%s", r.Raw)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	peak, err := apitest.ProcStatus(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle RSS %.1f MiB, peak RSS during %d concurrent uploads of %d MiB: %.1f MiB (+%.1f MiB)",
		float64(idle)/(1<<20), n, size>>20, float64(peak)/(1<<20), float64(peak-idle)/(1<<20))
	if peak-idle > 50<<20 {
		t.Fatalf("peak RSS %d MiB is %d MiB over the idle %d MiB, more than 50", peak>>20, (peak-idle)>>20, idle>>20)
	}
	if got := count(t, pool, `SELECT count(*) FROM attachments WHERE size = $1`, size); got != n {
		t.Fatalf("%d attachments of 25 MiB, want %d", got, n)
	}
}
