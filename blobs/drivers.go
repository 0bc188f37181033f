package blobs

// Drivers of the blob store, registered for blob.OpenBucket by URL scheme.
// file://, s3:// and azblob:// are in every build: a directory serves one
// instance; S3's API is what most object stores speak (AWS S3, MinIO, Ceph,
// Cloudflare R2, Backblaze B2, ...); Azure's driver costs little. The Google
// Cloud Storage driver brings gRPC and Google's SDK: measured on linux/amd64
// with Go 1.26 (docs/decisions/2026-12-01-blob-drivers.md), the binary is
// 40.7 MB without a blob store, 58.1 MB with file and S3, +4.4 MB with Azure,
// +31 MB with GCS, so gs:// is built only with the tag gcsblob
// (drivers_gcs.go).
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob"
)
