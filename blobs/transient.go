package blobs

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"taskflow/store"
)

// Transient reports whether err, returned by a Store (or a reader or writer
// it opened), is a failure of the moment, after which the same call may
// succeed shortly: of the blob store, a call cancelled or timed out, the
// store throttling (gcerrors.ResourceExhausted), an answer that means
// "later" (transientStatuses: S3's 503 SlowDown and 500 InternalError among
// them; S3's 400 RequestTimeout; Google Cloud Storage's gRPC codes
// Unavailable and Internal) or no answer at all (a connection refused or
// cut: store.Transient's network errors); of the database (Stage registers
// its files): store.Transient. The drivers' SDKs have retried such failures
// already before they return them (Google's retries a read until its
// context ends, and does not retry a write or a deletion without a
// precondition: Stage's and Delete's).
//
// An error to which the store gave a code of its own (gcerrors: NotFound,
// a bucket or an object missing; PermissionDenied, access denied or
// credentials refused; InvalidArgument, FailedPrecondition, ...) is not,
// whatever its cause (Azure's driver says NotFound for a storage account
// whose host name does not resolve), nor is any other answer of the store
// (S3's 403 SignatureDoesNotMatch): a store misconfigured is the operator's
// to fix, and a fault to log. Google Cloud Storage's codes are the
// exception: its driver makes them from the answer (Google's client maps a
// 500 or 502 to Internal and a 408 to FailedPrecondition, and the driver a
// 403 to NotFound), so its answer decides (googleAnswer).
//
// For an error of neither the blob store nor its SDKs, it is
// store.Transient: the rule the HTTP layer applies to every error.
func Transient(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.Canceled, gcerrors.DeadlineExceeded, gcerrors.ResourceExhausted:
		return true
	case gcerrors.Unknown:
		// No code of the store's: its answer, or the network, says.
	default:
		if !googleAnswer(err) {
			return false
		}
	}
	if status := answerStatus(err); status != 0 {
		var api interface{ ErrorCode() string } // S3's error code (smithy.APIError)
		return transientStatuses[status] || errors.As(err, &api) && api.ErrorCode() == "RequestTimeout"
	}
	if s, ok := grpcStatus(err); ok {
		return transientCodes[s.Code()]
	}
	return store.Transient(err)
}

// FailureLevel is the level at which a task in the background (the blob
// sweeper, the expiry and takeover of audit exports, a file released after
// its request) logs err, a failure of the blob store or the database that it
// leaves to a later pass: WARN when it is a failure of the moment
// (Transient: the next pass may well succeed, no page), ERROR otherwise
// (access denied, a bucket missing, credentials refused, a bug: every pass
// fails so until someone acts). It is the rule the HTTP layer applies to a
// request's errors: UNAVAILABLE at WARN, INTERNAL at ERROR.
func FailureLevel(err error) slog.Level {
	if Transient(err) {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// transientStatuses are the HTTP statuses of a blob store's answer that
// mean "later": a request timeout, too many requests, an internal error, a
// bad gateway, the store unavailable or slowing its clients down, a gateway
// timeout (what the AWS SDK and Google's storage client retry, and 408 and
// 429).
var transientStatuses = map[int]bool{408: true, 429: true, 500: true, 502: true, 503: true, 504: true}

// transientCodes are the gRPC codes of Google Cloud Storage's answer over
// its gRPC API (gs://bucket?grpc=true) that mean "later": those Google's
// storage client retries (its ShouldRetry).
var transientCodes = map[codes.Code]bool{codes.Unavailable: true, codes.Internal: true,
	codes.ResourceExhausted: true, codes.DeadlineExceeded: true}

// answerStatus returns the HTTP status of the blob store's answer err
// carries: S3's (smithy-go's response error; 0 when no answer came, a
// connection refused), Azure's, Google Cloud Storage's (its JSON API's); 0
// for none.
func answerStatus(err error) int {
	var s3 interface{ HTTPStatusCode() int }
	if errors.As(err, &s3) {
		return s3.HTTPStatusCode()
	}
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.StatusCode
	}
	var gcs *googleapi.Error
	if errors.As(err, &gcs) {
		return gcs.Code
	}
	return 0
}

// grpcStatus returns the gRPC status err carries (Google Cloud Storage's
// answer over its gRPC API), if any.
func grpcStatus(err error) (*status.Status, bool) {
	var g interface{ GRPCStatus() *status.Status }
	if errors.As(err, &g) && g.GRPCStatus() != nil {
		return g.GRPCStatus(), true
	}
	return nil, false
}

// googleAnswer reports whether err carries an answer of Google Cloud
// Storage: the status of its JSON API or the code of its gRPC API.
func googleAnswer(err error) bool {
	var gcs *googleapi.Error
	_, ok := grpcStatus(err)
	return ok || errors.As(err, &gcs)
}

// missing reports whether err says the object is not there: NotFound,
// unless the store answered 403 (Google Cloud Storage's driver says
// NotFound for access denied too: "does not have storage.objects.delete
// access ... (or it may not exist)"), which must not pass for an object
// deleted.
func missing(err error) bool {
	return gcerrors.Code(err) == gcerrors.NotFound && answerStatus(err) != http.StatusForbidden
}
