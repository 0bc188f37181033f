package httpapi

import (
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/ratelimit"
	"taskflow/store"
)

// download serves GET (and HEAD) /attachments/{id}: the bytes of an
// attachment, to a member of its workspace only, who is the bearer of the
// Authorization header or the user a download link (Attachment.downloadUrl)
// was signed for. Anyone else gets 404, as for an attachment that does not
// exist; a request with neither a token nor a link 401; an expired link 403.
// The response is a download (Content-Disposition: attachment), typed by the
// content type sniffed at upload, never sniffed by the browser (nosniff) and
// sandboxed should it be opened anyway; http.ServeContent answers ranges
// (Range, If-Range: curl -C -, browsers resuming), the ETag (the SHA-256) and
// If-None-Match, reading only the bytes of the range from the blob store.
// Errors are JSON {"errors":[...]}, as /audit/export's.
//
// Every request served to a user (by token or link) is charged to that user's
// cost budget (budget.go): 1 point before the attachment is looked up (a
// 404 costs that, whatever the id), and, for an answer with a body, the rest
// of ratelimit.DownloadCost of its length before its first byte
// (meteredDownload). A budget that cannot pay is 429, as on /query.
//
// A Range of more than maxRanges ranges (<= 0: DefaultMaxRanges) is answered
// with the whole file (tooManyRanges).
func download(db *store.DB, bs *blobs.Store, lim *ratelimit.Limiter, log *slog.Logger, maxRanges int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !getOrHead(w, r) {
			return
		}
		ctx := r.Context()
		id := r.PathValue("id")
		var userID string
		switch q := r.URL.Query(); {
		case auth.UserFrom(ctx) != nil:
			userID = auth.UserFrom(ctx).ID
		case blobs.Signed(q):
			var err error
			if userID, err = bs.LinkUser(id, q, time.Now()); err != nil {
				writeDownloadError(w, r, log, err)
				return
			}
		default:
			writeUnauthenticated(w, "send your Authorization header, or follow the attachment's downloadUrl")
			return
		}
		b := budget{lim: lim, user: userID}
		if o := b.charge(ctx, w, 1); o != nil {
			writeRateLimited(w, o)
			return
		}
		a, key, err := db.AttachmentForDownload(ctx, userID, id)
		if err != nil {
			writeDownloadError(w, r, log, err)
			return
		}
		rd, err := bs.NewReader(ctx, key)
		if err != nil {
			// A committed attachment always has its blob: unless the blob
			// store failed for the moment, this is a fault.
			writeUnknownError(w, r, log, err, "download: the blob of an attachment cannot be read", "attachment", a.ID, "key", key)
			return
		}
		defer rd.Close()
		disposition := mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename})
		if disposition == "" { // a name mime cannot encode: a download all the same
			disposition = "attachment"
		}
		serveDownload(w, r, b, rd, servedFile{contentType: a.ContentType, disposition: disposition, etag: a.SHA256,
			size: a.Size, modTime: a.CreatedAt}, maxRanges)
	})
}

// servedFile describes a file served by serveDownload.
type servedFile struct {
	contentType, disposition, etag string
	size                           int64
	modTime                        time.Time
}

// serveDownload serves the file f read from rd, a download as /attachments'
// (download's comment says how): its headers, Range (at most maxRanges
// ranges; <= 0: DefaultMaxRanges), and the body metered to b, which paid 1
// point already.
func serveDownload(w http.ResponseWriter, r *http.Request, b budget, rd io.ReadSeeker, f servedFile, maxRanges int) {
	if maxRanges <= 0 {
		maxRanges = DefaultMaxRanges
	}
	ctx := r.Context()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(TransferTimeout))
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Disposition", f.disposition)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("ETag", `"`+f.etag+`"`)
	// Revalidated every time (a 304 when unchanged): access can be revoked.
	h.Set("Cache-Control", "private, no-cache")
	if tooManyRanges(r.Header.Get("Range"), maxRanges) {
		r = r.Clone(ctx)
		r.Header.Del("Range") // the whole file, charged as such
	}
	http.ServeContent(&meteredDownload{ResponseWriter: w, ctx: ctx, budget: b, get: r.Method == http.MethodGet,
		size: f.size, paid: 1}, r, "", f.modTime, rd)
}

// DefaultMaxRanges is MAX_DOWNLOAD_RANGES's default (Options.MaxDownloadRanges):
// the most ranges of one Range header served as ranges. A header with more
// is answered with the whole file (RFC 9110 section 14.2 lets a server ignore
// it). ServeContent reads each range from the blob store anew (an S3 GET
// each, also for overlapping ones) and checks only that their sizes add up to
// no more than the file's, so the 64 KiB of a request's headers would ask
// 16,000 reads ("0-0,0-0,...") for a few points.
const DefaultMaxRanges = 16

// tooManyRanges reports whether the Range header h names more than maxRanges
// ranges (counted as ServeContent parses them: empty elements skipped).
func tooManyRanges(h string, maxRanges int) bool {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Count(spec, ",") < maxRanges {
		return false
	}
	n := 0
	for ra := range strings.SplitSeq(spec, ",") {
		if strings.Trim(ra, " \t\r\n") != "" {
			if n++; n > maxRanges {
				return true
			}
		}
	}
	return false
}

// writeDownloadError answers a refused download by its code; an unknown error
// is 503 UNAVAILABLE when it is a failure of the moment (writeUnavailable),
// else logged and answered as INTERNAL.
func writeDownloadError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var e *errs.Error
	if !errors.As(err, &e) {
		writeUnknownError(w, r, log, err, "download: attachment")
		return
	}
	status := http.StatusNotFound
	if e.Code == errs.CodeForbidden {
		status = http.StatusForbidden
	}
	writeExportJSONError(w, status, e.Code, e.Message)
}
