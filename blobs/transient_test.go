package blobs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"google.golang.org/api/googleapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"taskflow/blobs"
	"taskflow/store/storetest"
)

// The errors of the S3 driver, as the AWS SDK returns them through
// gocloud.dev/blob from an S3 server (gofakes3 behind a handler that fails
// as told): an answer 5xx, S3's RequestTimeout and a dropped connection are
// failures of the moment, for a read and for a write (Stage); access denied,
// a bucket missing and a signature refused are not (the operator's to fix),
// and neither is an object missing.
func TestTransientS3Errors(t *testing.T) {
	t.Parallel()
	backend := s3mem.New()
	if err := backend.CreateBucket("attachments"); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Pointer[[2]string] // status, S3 error code; "0": the connection dropped
	srv := failingServer(t, &fail, gofakes3.New(backend).Server(), "application/xml", func(_ int, code string) string {
		return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>failing</Message></Error>`
	})
	bs, err := blobs.Open(t.Context(), blobs.Options{
		URL: "s3://attachments?region=us-east-1&use_path_style=true&disable_https=true&anonymous=true&endpoint=" + srv.URL,
		DB:  storetest.DB(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	ctx := context.Background()
	f, err := bs.Stage(ctx, strings.NewReader("hello"), "a.txt", 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.NewReader(ctx, "no such key"); err == nil || blobs.Transient(err) {
		t.Errorf("an object missing: transient %v: %v", blobs.Transient(err), err)
	}
	for _, c := range []struct {
		status, code string
		transient    bool
		write        bool // also Stage
	}{
		{"503", "SlowDown", true, true},
		{"500", "InternalError", true, false},
		{"400", "RequestTimeout", true, false},
		{"0", "", true, true},
		{"403", "AccessDenied", false, true},
		{"404", "NoSuchBucket", false, false},
		{"403", "SignatureDoesNotMatch", false, false},
		{"400", "InvalidRequest", false, false},
	} {
		fail.Store(&[2]string{c.status, c.code})
		_, err := bs.NewReader(ctx, f.Key)
		if err == nil || blobs.Transient(err) != c.transient {
			t.Errorf("%s %s: a read: transient %v, want %v: %v", c.status, c.code, blobs.Transient(err), c.transient, err)
		}
		if c.write {
			_, err := bs.Stage(ctx, strings.NewReader("hello"), "a.txt", 100)
			if err == nil || blobs.Transient(err) != c.transient {
				t.Errorf("%s %s: a write: transient %v, want %v: %v", c.status, c.code, blobs.Transient(err), c.transient, err)
			}
		}
		fail.Store(nil)
	}
}

// failingServer starts a server that passes requests to next while *fail is
// nil, drops every connection unanswered while its status is "0", and else
// answers its status with the body of contentType that body makes of the
// status and the error code (fail's second element), as a blob store
// failing does.
func failingServer(t *testing.T, fail *atomic.Pointer[[2]string], next http.Handler, contentType string,
	body func(status int, code string) string,
) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := fail.Load()
		switch {
		case f == nil:
			next.ServeHTTP(w, r)
		case f[0] == "0":
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		default:
			var status int
			fmt.Sscan(f[0], &status)
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			io.WriteString(w, body(status, f[1]))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Errors that do not come through a bucket: Azure's answers by their
// status; Google Cloud Storage's (gcsblob, built with -tags gcsblob; see
// gcs_test.go for them through the driver) by the status of the JSON API's
// answer (*googleapi.Error, as the storage client returns it, alone or
// wrapped once its retries ran out) or the gRPC API's code; and the
// database's and the context's as store.Transient says.
func TestTransientOtherErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("azblob: %w", &azcore.ResponseError{StatusCode: http.StatusServiceUnavailable, ErrorCode: "ServerBusy"}), true},
		{fmt.Errorf("azblob: %w", &azcore.ResponseError{StatusCode: http.StatusInternalServerError, ErrorCode: "InternalError"}), true},
		{fmt.Errorf("azblob: %w", &azcore.ResponseError{StatusCode: http.StatusForbidden, ErrorCode: "AuthorizationFailure"}), false},
		{fmt.Errorf("gcsblob: %w", &googleapi.Error{Code: http.StatusServiceUnavailable, Message: "backendError"}), true},
		{fmt.Errorf("storage: retry failed after 3 attempts; last error: %w", &googleapi.Error{Code: http.StatusInternalServerError}), true},
		{&googleapi.Error{Code: http.StatusBadGateway}, true},
		{&googleapi.Error{Code: http.StatusGatewayTimeout}, true},
		{&googleapi.Error{Code: http.StatusRequestTimeout}, true},
		{&googleapi.Error{Code: http.StatusForbidden, Message: "does not have storage.objects.get access"}, false},
		{&googleapi.Error{Code: http.StatusUnauthorized}, false},
		{&googleapi.Error{Code: http.StatusBadRequest}, false},
		{fmt.Errorf("gcsblob: %w", status.Error(codes.Unavailable, "the service is unavailable")), true},
		{fmt.Errorf("gcsblob: %w", status.Error(codes.PermissionDenied, "denied")), false},
		{fmt.Errorf("register blob upload: %w", &pgconn.PgError{Code: "53300"}), true}, // too_many_connections
		{fmt.Errorf("register blob upload: %w", &pgconn.PgError{Code: "23505"}), false},
		{fmt.Errorf("write: %w", context.Canceled), true},
		{errors.New("something else"), false},
	} {
		if got := blobs.Transient(c.err); got != c.want {
			t.Errorf("%v: transient %v, want %v", c.err, got, c.want)
		}
	}
}
