//go:build gcsblob

package blobs

// The Google Cloud Storage driver (gs://bucket), built with -tags gcsblob.
import _ "gocloud.dev/blob/gcsblob"

// hasGCS reports whether this binary opens gs:// URLs.
const hasGCS = true
