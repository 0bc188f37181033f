//go:build !gcsblob

package blobs

// hasGCS reports whether this binary opens gs:// URLs.
const hasGCS = false
