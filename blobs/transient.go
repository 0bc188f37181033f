package blobs

import (
	"errors"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"gocloud.dev/gcerrors"

	"taskflow/store"
)

// Transient reports whether err, returned by a Store (or a reader or writer
// it opened), is a failure of the moment, after which the same call may
// succeed shortly: of the blob store, a call cancelled or timed out, the
// store throttling (gcerrors.ResourceExhausted), an answer that means
// "later" (transientStatuses: S3's 503 SlowDown and 500 InternalError among
// them; S3's 400 RequestTimeout) or no answer at all (a connection refused
// or cut: store.Transient's network errors); of the database (Stage
// registers its files): store.Transient. The drivers' SDKs have retried such
// failures already before they return them.
//
// An error to which the store gave a code of its own (gcerrors: NotFound,
// a bucket or an object missing; PermissionDenied, access denied or
// credentials refused; InvalidArgument, FailedPrecondition, ...) is not,
// whatever its cause (Azure's driver says NotFound for a storage account
// whose host name does not resolve), nor is any other answer of the store
// (S3's 403 SignatureDoesNotMatch): a store misconfigured is the operator's
// to fix, and a fault to log.
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
		return false
	}
	if status := answerStatus(err); status != 0 {
		var api interface{ ErrorCode() string } // S3's error code (smithy.APIError)
		return transientStatuses[status] || errors.As(err, &api) && api.ErrorCode() == "RequestTimeout"
	}
	return store.Transient(err)
}

// transientStatuses are the HTTP statuses of a blob store's answer that
// mean "later": a request timeout, too many requests, an internal error, a
// bad gateway, the store unavailable or slowing its clients down, a gateway
// timeout (what the AWS SDK retries, and 408 and 429).
var transientStatuses = map[int]bool{408: true, 429: true, 500: true, 502: true, 503: true, 504: true}

// answerStatus returns the HTTP status of the blob store's answer err
// carries: S3's (smithy-go's response error; 0 when no answer came, a
// connection refused), Azure's; 0 for none.
func answerStatus(err error) int {
	var s3 interface{ HTTPStatusCode() int }
	if errors.As(err, &s3) {
		return s3.HTTPStatusCode()
	}
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.StatusCode
	}
	return 0
}
