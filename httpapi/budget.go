package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/errs"
	"taskflow/ratelimit"
)

// budget charges the requests of the routes beside /query that serve data
// (GET /attachments/{id}, GET /audit/export) to the cost budget of the user
// they are served to, the budget of that user's operations on /query
// (docs/api.md#rate-limits-and-query-cost). A nil limiter (the rate-limit
// guard left out) charges nothing.
type budget struct {
	lim  *ratelimit.Limiter
	user string
}

// charge takes points from the budget and writes the RateLimit headers of the
// budget after it. When the budget cannot pay, nothing is taken and it
// returns the refusal, for writeRateLimited; nothing else is written.
func (b budget) charge(ctx context.Context, w http.ResponseWriter, points int64) (refused *ratelimit.Outcome) {
	refused, _ = b.chargeFor(ctx, w, points, points) // holds nothing
	return refused
}

// chargeFor is charge for work that may cost up to need points in all (need
// more than points: the rest is charged once the work is done, for what it
// did): the budget must be able to pay need now, or nothing is taken and the
// refusal returned. The rest is held against the budget until release,
// never nil, is called (take).
func (b budget) chargeFor(ctx context.Context, w http.ResponseWriter, points, need int64) (refused *ratelimit.Outcome, release func()) {
	if b.lim == nil {
		return nil, func() {}
	}
	o, release := b.take(ctx, points, need)
	setRateLimitHeaders(w, o)
	if o.Limited != "" {
		return o, release
	}
	return nil, release
}

// take charges points when the budget can pay need (see chargeFor) and
// returns what the budget answered: a refusal (of either) takes nothing.
// The rest of need, charged once the work is done, is held against the
// budget (ratelimit.Limiter.Reserve) until release, which the caller calls
// once that charge is made or the work failed (release is never nil).
func (b budget) take(ctx context.Context, points, need int64) (o *ratelimit.Outcome, release func()) {
	release = func() {}
	if need > points {
		if o, release = b.lim.Reserve(ctx, b.user, need, need-points); o.Limited != "" {
			return o, release
		}
	}
	if o = b.lim.Charge(ctx, b.user, points); o.Limited != "" {
		release()
		release = func() {}
	}
	return o, release
}

// wait takes points from the budget, waiting for them while it cannot pay
// them, or while it cannot pay need (see chargeFor), until ctx ends (its
// error is returned then). What it holds of need (take) is released by the
// returned function, never nil.
func (b budget) wait(ctx context.Context, points, need int64) (release func(), err error) {
	if b.lim == nil {
		return func() {}, nil
	}
	for {
		o, release := b.take(ctx, points, need)
		if o.Limited == "" {
			return release, nil
		}
		t := time.NewTimer(o.RetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return func() {}, ctx.Err()
		case <-t.C:
		}
	}
}

// writeRateLimited answers a request its budget cannot pay as /query does:
// 429 with Retry-After, Cache-Control: no-store and the RATE_LIMITED error
// with retryAfter, as JSON (the RateLimit headers are the caller's, from
// charge).
func writeRateLimited(w http.ResponseWriter, o *ratelimit.Outcome) {
	w.Header().Set("Content-Type", "application/json")
	writeTooMany(w, o.RetryAfterSeconds(), gqlerror.List{o.RateLimitedError()})
}

// rateLimitedError is the refusal of a charge, as an error.
type rateLimitedError struct{ o *ratelimit.Outcome }

func (e rateLimitedError) Error() string { return "rate limited" }

// meteredDownload is the ResponseWriter http.ServeContent answers a download
// through. When ServeContent writes the status of an answer with a body (200
// or 206 to a GET) it charges the bytes of its Content-Length (the file, the
// range, or the ranges with their multipart framing) beyond what was paid, at
// ratelimit.DownloadCost, before the first of them is sent; a budget that
// cannot pay turns the answer into the 429, and nothing of the file is sent.
type meteredDownload struct {
	http.ResponseWriter
	ctx    context.Context
	budget budget
	get    bool
	// size is the file's size, charged when the length is missing (never, from
	// ServeContent).
	size int64
	// paid is what the request has paid already.
	paid           int64
	wrote, refused bool
}

// contentHeaders are the headers of the file's answer, taken off a 429.
var contentHeaders = []string{"Content-Type", "Content-Length", "Content-Range", "Content-Disposition",
	"Content-Security-Policy", "Etag", "Last-Modified", "Accept-Ranges", "Cache-Control"}

func (m *meteredDownload) WriteHeader(status int) {
	if m.wrote {
		m.ResponseWriter.WriteHeader(status)
		return
	}
	m.wrote = true
	if status >= http.StatusBadRequest {
		m.refuse(status)
		return
	}
	if m.get && (status == http.StatusOK || status == http.StatusPartialContent) {
		n, err := strconv.ParseInt(m.Header().Get("Content-Length"), 10, 64)
		if err != nil {
			n = m.size
		}
		if extra := ratelimit.DownloadCost(n) - m.paid; extra > 0 {
			if o := m.budget.charge(m.ctx, m.ResponseWriter, extra); o != nil {
				m.refused = true
				for _, k := range contentHeaders {
					m.Header().Del(k)
				}
				writeRateLimited(m.ResponseWriter, o)
				return
			}
		}
	}
	m.ResponseWriter.WriteHeader(status)
}

// refuse answers ServeContent's refusals (416 for a Range the file cannot
// satisfy, 412 for an If-Match or If-Unmodified-Since it does not, 500) as
// JSON errors, as every other refused download, instead of its text; the
// text it writes next is dropped. A 416 keeps its Content-Range (bytes
// */size).
func (m *meteredDownload) refuse(status int) {
	m.refused = true
	h := m.Header()
	contentRange := h.Get("Content-Range")
	for _, k := range contentHeaders {
		h.Del(k)
	}
	code, msg := errs.CodeBadUserInput, "the file does not match the request's If-Match or If-Unmodified-Since header"
	switch status {
	case http.StatusRequestedRangeNotSatisfiable:
		if contentRange != "" {
			h.Set("Content-Range", contentRange)
		}
		msg = "the Range header is malformed or names no byte of the file (of " + strconv.FormatInt(m.size, 10) + " bytes)"
	case http.StatusPreconditionFailed:
	default:
		code, msg = errs.CodeInternal, "internal error"
	}
	writeExportJSONError(m.ResponseWriter, status, code, msg)
}

func (m *meteredDownload) Write(p []byte) (int, error) {
	if !m.wrote {
		m.WriteHeader(http.StatusOK)
	}
	if m.refused {
		return 0, errDownloadRefused
	}
	return m.ResponseWriter.Write(p)
}

// Unwrap is for http.ResponseController.
func (m *meteredDownload) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// errDownloadRefused ends the copy of a download its budget refused.
var errDownloadRefused = errors.New("download: refused by the cost budget")
