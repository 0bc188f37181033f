package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/auditexport"
	"taskflow/auth"
	"taskflow/errs"
	"taskflow/ratelimit"
	"taskflow/reqinfo"
	"taskflow/store"
)

// exportFlushEvery is how many events the export writes between flushes.
const exportFlushEvery = 256

// auditExport serves GET /audit/export?workspaceId=..&format=ndjson|csv with the
// filters of auditEvents as query parameters (actions comma-separated, actorId,
// entityType, entityId, since, until as RFC 3339). It streams every matching
// event newest first, read a page at a time (store.EachAuditEvent: no database
// connection is held while a slow client reads), flushing every few hundred
// rows. The access rule is auditEvents': OWNER and ADMIN of the workspace.
// Errors found before the first byte (no user 401, role 403, workspace 404, bad
// parameters 400, a NUL or invalid UTF-8 in any parameter among them) are a
// JSON body {"errors":[{"message", "extensions":{"code"}}]}; a failure while
// streaming ends the response early (logged).
//
// An export is charged to its user's cost budget (budget.go): 1 point before
// access is checked (a 403 or 404 costs that, whatever the workspace), then
// exportPagePoints for each page of events before it is read: the first
// page's before the first byte (a budget that cannot pay is 429, as on
// /query), each later one after what was read is flushed, waiting while the
// budget cannot pay it, so that a long export is paced by its user's budget
// and never cut short by it (each page has its own write deadline,
// exportPageTimeout, so the server's WriteTimeout does not cut it either).
// Each page looks at no more than store.AuditScanLimit events of the log
// (the next going on from there), and the events it looked at are charged
// once it is read, as on auditEvents: ratelimit.ScanCost, a point for every
// whole 1,000, waited for as a later page's points are (so an export that
// reads few of the events it looks at is paced by them too, and an ordinary
// one, whose pages look at 101, costs what it did). A page's points are
// taken only when the budget can also pay all its scan may look at
// (ratelimit.ScanCost of store.AuditScanLimit, for a filter no index serves
// whole): the first page is 429 before it is read, a later one waits.
// HEAD answers the headers after the access check, reading no page.
func auditExport(db *store.DB, lim *ratelimit.Limiter, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !getOrHead(w, r) {
			return
		}
		user := auth.UserFrom(r.Context())
		if user == nil {
			writeUnauthenticated(w, errs.ErrUnauthenticated.Message)
			return
		}
		q := r.URL.Query()
		if err := queryParamsFault(q); err != nil {
			writeExportError(w, log, r, err)
			return
		}
		workspaceID := q.Get("workspaceId")
		format := strings.ToLower(q.Get("format"))
		if format == "" {
			format = "ndjson"
		}
		filter, err := exportFilter(q)
		switch {
		case workspaceID == "":
			err = errs.Errorf(errs.CodeBadUserInput, "workspaceId is required")
		case format != "ndjson" && format != "csv":
			err = errs.Errorf(errs.CodeBadUserInput, "format must be ndjson or csv")
		}
		if err != nil {
			writeExportError(w, log, r, err)
			return
		}
		b := budget{lim: lim, user: user.ID}
		if o := b.charge(r.Context(), w, 1); o != nil {
			writeRateLimited(w, o)
			return
		}
		var out *exportWriter
		started := false
		n := 0
		rc := http.NewResponseController(w)
		// What a page's check holds of its scan's worst case, released once
		// the scan is charged, or the export ends.
		held := func() {}
		defer func() { held() }()
		page := func(p, scan int) error {
			held()
			held = func() {}
			// Each page is written within exportPageTimeout of its start: a
			// long (paced) export is not cut by the server's WriteTimeout, a
			// client that stops reading still is.
			defer func() { _ = rc.SetWriteDeadline(time.Now().Add(exportPageTimeout)) }()
			// The page's points are taken when the budget can also pay
			// for all the page may look at, charged once it is read.
			need := exportPagePoints + ratelimit.ScanCost(int64(scan))
			switch {
			case p == 0 && r.Method == http.MethodHead:
				return errExportHead
			case p == 0:
				o, release := b.chargeFor(r.Context(), w, exportPagePoints, need)
				held = release
				if o != nil {
					return rateLimitedError{o}
				}
				return nil
			}
			if started {
				if err := out.flush(); err != nil {
					return err
				}
			}
			release, err := b.wait(r.Context(), exportPagePoints, need)
			held = release
			return err
		}
		examined := func(looked int) error {
			held()
			held = func() {}
			points := ratelimit.ScanCost(int64(looked))
			if points == 0 {
				return nil
			}
			defer func() { _ = rc.SetWriteDeadline(time.Now().Add(exportPageTimeout)) }()
			if started {
				if err := out.flush(); err != nil {
					return err
				}
			}
			_, err := b.wait(r.Context(), points, points) // holds nothing
			return err
		}
		err = db.EachAuditEvent(r.Context(), user, workspaceID, filter, page, examined, func(e *store.AuditEvent) error {
			if !started {
				started = true
				out = startExport(w, format, workspaceID)
			}
			if err := out.write(e); err != nil {
				return err
			}
			if n++; n%exportFlushEvery == 0 {
				return out.flush()
			}
			return nil
		})
		var refused rateLimitedError
		switch {
		case errors.Is(err, errExportHead):
			err = nil
		case errors.As(err, &refused) && !started:
			writeRateLimited(w, refused.o)
			return
		}
		if err != nil {
			if !started {
				writeExportError(w, log, r, err)
				return
			}
			if r.Context().Err() == nil {
				log.ErrorContext(r.Context(), "audit export failed while streaming", "err", err,
					"request_id", reqinfo.From(r.Context()).RequestID)
			}
			// Abort the response so the client sees a truncated transfer rather
			// than a complete-looking file.
			panic(http.ErrAbortHandler)
		}
		if !started {
			out = startExport(w, format, workspaceID)
		}
		if err := out.flush(); err != nil && r.Context().Err() == nil {
			log.ErrorContext(r.Context(), "audit export: flush", "err", err)
		}
	})
}

// exportPageTimeout bounds the writing of one page of an export (the
// server's WriteTimeout, which would otherwise bound the whole export).
const exportPageTimeout = 60 * time.Second

// exportPagePoints is what a page of an export costs: a point for each event
// it can hold, as auditEvents(first: 100) { nodes { ... } } costs 101 on
// /query (1 for the connection, 1 for each event).
const exportPagePoints = store.AuditExportPageSize

// errExportHead ends a HEAD export before its first page.
var errExportHead = errors.New("audit export: HEAD reads no page")

// exportFilter reads the filter query parameters; a malformed time is a
// BAD_USER_INPUT error.
func exportFilter(q map[string][]string) (store.AuditFilter, error) {
	var f store.AuditFilter
	get := func(k string) *string {
		if v := strings.TrimSpace(firstValue(q[k])); v != "" {
			return &v
		}
		return nil
	}
	for _, v := range q["actions"] {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				f.Actions = append(f.Actions, a)
			}
		}
	}
	f.ActorID, f.EntityType, f.EntityID = get("actorId"), get("entityType"), get("entityId")
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := get(p.name); s != nil {
			t, err := time.Parse(time.RFC3339Nano, *s)
			if err != nil {
				return f, errs.Errorf(errs.CodeBadUserInput, "%s must be an RFC 3339 time with a time zone", p.name)
			}
			*p.dst = &t
		}
	}
	return f, nil
}

func firstValue(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// exportWriter writes events in one format (auditexport's encoder) and
// flushes them to the client.
type exportWriter struct {
	enc auditexport.Encoder
	f   http.Flusher
}

func (x *exportWriter) write(e *store.AuditEvent) error { return x.enc.Write(e) }

func (x *exportWriter) flush() error {
	err := x.enc.Flush()
	if x.f != nil {
		x.f.Flush()
	}
	return err
}

// startExport writes the headers of a successful export and returns its writer.
func startExport(w http.ResponseWriter, format, workspaceID string) *exportWriter {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	name := "audit-" + exportFileName(workspaceID) + "." + format
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	h.Set("Content-Type", exportContentType(format))
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	return &exportWriter{enc: auditexport.NewEncoder(w, format), f: flusher}
}

// exportContentType is the Content-Type of an export in format (ndjson or
// csv, in any case).
func exportContentType(format string) string {
	if strings.EqualFold(format, "csv") {
		return "text/csv; charset=utf-8"
	}
	return "application/x-ndjson"
}

// exportFileName keeps the characters of an id that are safe in a header.
func exportFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return -1
	}, s)
}

// writeExportError answers with the JSON error body of err and the status its
// code means; an unknown error is 503 UNAVAILABLE when it is a failure of the
// moment (writeUnavailable), else logged and answered as INTERNAL.
func writeExportError(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	var e *errs.Error
	if pgErr := inputRefusedByPostgres(r.Context(), log, err); pgErr != nil {
		e = pgErr
	} else if !errors.As(err, &e) {
		// A cancellation (the client gone) is a failure of the moment too.
		writeUnknownError(w, r, log, err, "internal error")
		return
	}
	status := map[errs.Code]int{
		errs.CodeUnauthenticated: http.StatusUnauthorized,
		errs.CodeForbidden:       http.StatusForbidden,
		errs.CodeNotFound:        http.StatusNotFound,
		errs.CodeBadUserInput:    http.StatusBadRequest,
		errs.CodeConflict:        http.StatusConflict,
	}[e.Code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	writeExportJSONError(w, status, e.Code, e.Message)
}

// writeExportJSONError writes {"errors":[{"message":..,"extensions":{"code":..}}]}.
func writeExportJSONError(w http.ResponseWriter, status int, code errs.Code, msg string) {
	writeJSONError(w, status, &errs.Error{Code: code, Message: msg})
}

// writeJSONError writes e as {"errors":[{"message":..,"extensions":{"code":..,..}}]}
// with the status, extensions holding e's besides its code (as the presenter
// shows it).
func writeJSONError(w http.ResponseWriter, status int, e *errs.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": gqlerror.List{shown(&gqlerror.Error{}, e)}})
}

// getOrHead reports whether r is a GET or a HEAD, the methods of the export
// and download routes; to any other it answers 405 with Allow (JSON errors, as
// the routes' others) and returns false.
func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeExportJSONError(w, http.StatusMethodNotAllowed, errs.CodeBadUserInput, "use GET")
	return false
}

// writeUnauthenticated answers a request of the export and download routes
// that carries no credential: 401 with the bearer challenge and a JSON
// UNAUTHENTICATED error saying message.
func writeUnauthenticated(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="taskflow"`)
	writeExportJSONError(w, http.StatusUnauthorized, errs.CodeUnauthenticated, message)
}
