//go:build azureblob

package blobs

// The Azure Blob Storage driver (azblob://container), built with -tags azureblob.
import _ "gocloud.dev/blob/azureblob"

// hasAzure reports whether this binary opens azblob:// URLs.
const hasAzure = true
