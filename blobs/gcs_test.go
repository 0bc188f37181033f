//go:build gcsblob

package blobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/blobs"
	"taskflow/store/storetest"
)

// The errors of the Google Cloud Storage driver (built with -tags gcsblob),
// as Google's storage client returns them through gocloud.dev/blob from a
// server of the JSON API that fails as told (STORAGE_EMULATOR_HOST points the
// client at it, as at a local emulator; no network, no credentials): an
// answer 5xx, 408 or 429 and a dropped connection are failures of the
// moment; access denied, a bucket missing and a request refused are not.
// Writes (Stage) and deletions, which the client does not retry (not
// idempotent without a precondition), return the answer itself; reads,
// which it retries until their context ends, are checked for the refusals
// only (a failure of the moment ends them with their context: transient
// whatever the answer).
func TestTransientGCSErrors(t *testing.T) {
	var fail atomic.Pointer[[2]string] // status, reason; "0": the connection dropped
	none := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error": {"code": 500, "message": "the test set no answer"}}`, http.StatusInternalServerError)
	})
	srv := failingServer(t, &fail, none, "application/json; charset=UTF-8", func(status int, reason string) string {
		return fmt.Sprintf(`{"error": {"code": %d, "message": "failing", "errors": [{"reason": %q, "message": "failing"}]}}`,
			status, reason)
	})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL, "http://"))
	bs, err := blobs.Open(t.Context(), blobs.Options{URL: "gs://attachments?anonymous=true",
		DB: storetest.DB(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	ctx := context.Background()
	for _, c := range []struct {
		status, reason string
		transient      bool
	}{
		{"503", "backendError", true},
		{"500", "internalError", true},
		{"502", "badGateway", true},
		{"504", "gatewayTimeout", true},
		{"408", "requestTimeout", true},
		{"429", "rateLimitExceeded", true},
		{"0", "", true},
		{"403", "forbidden", false},
		{"401", "required", false},
		{"404", "notFound", false},
		{"400", "invalid", false},
	} {
		fail.Store(&[2]string{c.status, c.reason})
		_, err := bs.Stage(ctx, strings.NewReader("hello"), "a.txt", 100)
		if err == nil || blobs.Transient(err) != c.transient {
			t.Errorf("%s %s: a write: transient %v, want %v: %v", c.status, c.reason, blobs.Transient(err), c.transient, err)
		}
		if err := bs.Delete(ctx, "some key"); c.status != "404" && (err == nil || blobs.Transient(err) != c.transient) {
			t.Errorf("%s %s: a deletion: transient %v, want %v: %v", c.status, c.reason, blobs.Transient(err), c.transient, err)
		}
		if !c.transient {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // bounds a retry, were the answer retried
			_, err := bs.NewReader(rctx, "some key")
			cancel()
			if err == nil || blobs.Transient(err) {
				t.Errorf("%s %s: a read: transient %v, want false: %v", c.status, c.reason, blobs.Transient(err), err)
			}
		}
	}
}
