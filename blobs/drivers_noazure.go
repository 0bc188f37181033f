//go:build !azureblob

package blobs

// hasAzure reports whether this binary opens azblob:// URLs.
const hasAzure = false
