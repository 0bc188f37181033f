package httpapi

import (
	"log/slog"
	"net/http"
	"strings"

	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/ratelimit"
	"taskflow/store"
)

// auditExportDownload serves GET (and HEAD) /audit/exports/{id}: the file
// of an asynchronous audit export (AuditExport.downloadUrl), to an OWNER or
// ADMIN of its workspace (the sync export's rule) who sends the
// Authorization header: 401 without it, 404 for an export that does not
// exist or a workspace the user is not a member of, 403 for a MEMBER or
// VIEWER, 409 (CONFLICT) for an export that is not SUCCEEDED. It is served
// and metered as an attachment (serveDownload: 1 point before the lookup,
// then the rest of ratelimit.DownloadCost of the body's length; Range).
func auditExportDownload(db *store.DB, bs *blobs.Store, lim *ratelimit.Limiter, log *slog.Logger, maxRanges int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !getOrHead(w, r) {
			return
		}
		ctx := r.Context()
		user := auth.UserFrom(ctx)
		if user == nil {
			writeUnauthenticated(w, errs.ErrUnauthenticated.Message)
			return
		}
		b := budget{lim: lim, user: user.ID}
		if o := b.charge(ctx, w, 1); o != nil {
			writeRateLimited(w, o)
			return
		}
		x, err := db.AuditExportForDownload(ctx, user.ID, r.PathValue("id"))
		if err != nil {
			writeExportError(w, log, r, err)
			return
		}
		rd, err := bs.NewReader(ctx, x.ObjectKey)
		if err != nil {
			// A SUCCEEDED export has its file until it expires: unless the
			// blob store failed for the moment, this is a fault.
			writeUnknownError(w, r, log, err, "audit export download: the file cannot be read", "export", x.ID, "key", x.ObjectKey)
			return
		}
		defer rd.Close()
		ext := strings.ToLower(string(x.Format))
		name := "audit-" + exportFileName(x.WorkspaceID) + "-" + exportFileName(x.ID) + "." + ext
		serveDownload(w, r, b, rd, servedFile{contentType: exportContentType(ext),
			disposition: `attachment; filename="` + name + `"`, etag: x.ID, size: int64(x.Bytes), modTime: x.CreatedAt}, maxRanges)
	})
}
