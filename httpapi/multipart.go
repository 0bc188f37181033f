package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"

	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/errs"
	"taskflow/jsoncanon"
	"taskflow/store"
)

// Uploads: POST /query as multipart/form-data, the GraphQL multipart request
// specification (github.com/jaydenseric/graphql-multipart-request-spec): a
// part "operations" (the JSON body of a POST), a part "map" ({"0":
// ["variables.file"]}, which file goes where the variables hold null), then
// the files. The operation is parsed, validated and charged (its cost plus the
// files' bytes from the request's Content-Length) before any file is read:
// nothing of a refused operation is stored. Each file then streams straight
// into the blob store while being hashed, never whole in memory nor in a
// temporary file (blobs.Store.Stage; the measurement that chose this is
// docs/decisions/2026-12-01-upload-streaming.md); the operation runs once every
// file is stored, and what it did not adopt is deleted before the response.
const (
	mediaMultipart = "multipart/form-data"
	// maxUploadFiles bounds the files of one request.
	maxUploadFiles = 10
	// maxUploadPaths bounds the places one file goes in the variables.
	maxUploadPaths = 10
	// maxMapBytes bounds the map part.
	maxMapBytes = 64 << 10
	// maxPartHead bounds what comes before the content of each part: the
	// preamble or the end of the part before, the boundary and the part's
	// headers (the server's MaxHeaderBytes; mime/multipart alone allows
	// 10 MiB of headers a part, read into memory).
	maxPartHead = 64 << 10
	// partSlack is how far the multipart reader may read past a part's
	// content: its buffer, looking for the next boundary.
	partSlack = 8 << 10
)

// TransferTimeout bounds the whole of a multipart request (an upload), and
// of a download's response: the server's ReadTimeout and WriteTimeout (30s,
// 60s) would cut a 25 MiB transfer over a slow mobile link. An upload's
// bytes are in the blob store, unadopted, for up to that long: a
// BLOB_SWEEP_GRACE below it lets the sweeper delete a slow upload's bytes.
const TransferTimeout = 10 * time.Minute

// DefaultMaxUploadsPerUser is MAX_UPLOADS_PER_USER's default
// (Options.MaxUploadsPerUser): the most multipart requests of one user that
// a server instance reads at once. Each may take TransferTimeout to arrive
// and holds a connection, a blob-store writer and a registration meanwhile,
// and its points are charged by its Content-Length, so a few points each
// would otherwise keep hundreds stalled per user.
const DefaultMaxUploadsPerUser = 16

// uploadSlots counts the multipart requests of each user being read.
type uploadSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// newUploadSlots returns slots for max multipart requests per user (<= 0:
// DefaultMaxUploadsPerUser).
func newUploadSlots(max int) *uploadSlots {
	if max <= 0 {
		max = DefaultMaxUploadsPerUser
	}
	return &uploadSlots{max: max, n: map[string]int{}}
}

// take takes a slot of user, and returns the function that gives it back
// (once), or nil when user has max already. A nil s has no bound.
func (s *uploadSlots) take(user string) (give func()) {
	if s == nil {
		return func() {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[user] >= s.max {
		return nil
	}
	s.n[user]++
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.n[user]--; s.n[user] <= 0 {
			delete(s.n, user)
		}
	})
}

// preflightHeaders are the request headers one of which a multipart request
// must carry: a browser sends a multipart/form-data POST cross-site without a
// CORS preflight (it is a "simple" request), but not one with a custom header,
// so requiring one keeps other sites' pages from uploading with a user's
// credentials (what Apollo Server's CSRF prevention does, and the headers its
// clients send).
var preflightHeaders = []string{"GraphQL-Preflight", "Apollo-Require-Preflight", "X-Apollo-Operation-Name"}

// isMultipart reports whether a POST's body is multipart/form-data.
func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == mediaMultipart
}

// upload is one file of a multipart request, staged in the blob store once
// its part is read; its UploadedFile is the one the variables share.
type upload struct {
	key    string
	file   *store.UploadedFile
	staged bool
}

// multipartFiles are the files of a multipart request: read (staged) after the
// operation is admitted, released after it ran.
type multipartFiles struct {
	blobs    *blobs.Store
	log      *slog.Logger
	reader   *multipart.Reader
	body     *budgetBody
	uploads  []*upload
	declared int64
	// slot gives back the request's upload slot (uploadSlots).
	slot func()
	// transferBy is the end of the request's transfer (TransferTimeout), its
	// answer's write deadline at least (Transport.execute).
	transferBy time.Time
}

// errPartHead is the error of a body whose part has more than maxPartHead
// bytes before its content.
var errPartHead = errors.New("httpapi: a multipart part's headers are too large")

// budgetBody is a multipart request's body, of which the reader may read at
// most n more bytes: the transport sets n before each part's headers
// (maxPartHead) and before its content (what the part may hold, plus
// partSlack), so that a body without a Content-Length, or with parts the
// operations, map and files limits do not count, is bounded all the same.
type budgetBody struct {
	r io.Reader
	n int64
}

func (b *budgetBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errPartHead
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}

// nextPart returns the next part of mr, whose headers and what comes before
// them may take maxPartHead bytes of body, and lets its content take limit
// bytes (plus partSlack).
func nextPart(mr *multipart.Reader, body *budgetBody, limit int64) (*multipart.Part, error) {
	body.n = maxPartHead
	part, err := mr.NextPart()
	body.n = limit + partSlack
	return part, err
}

// partHeadTooLarge is the answer to a part with more than maxPartHead bytes
// before its content.
func partHeadTooLarge() *requestError {
	return parseError(http.StatusRequestEntityTooLarge, "a part of the multipart request has more than "+
		strconv.Itoa(maxPartHead)+" bytes of headers (with what comes before them)")
}

// paramsFromMultipart reads a multipart request's operations and map parts,
// and puts an Upload in the variables where each file goes; the files are
// read later (stream).
func (t Transport) paramsFromMultipart(w http.ResponseWriter, r *http.Request) (_ *graphql.RawParams, files *multipartFiles, _ *requestError) {
	if t.Blobs == nil {
		return nil, nil, parseError(http.StatusUnsupportedMediaType, "this server takes no files: the body must be application/json")
	}
	preflight := false
	for _, h := range preflightHeaders {
		preflight = preflight || r.Header.Get(h) != ""
	}
	if !preflight {
		return nil, nil, &requestError{status: http.StatusBadRequest, code: string(errs.CodeBadUserInput),
			message: "a multipart request must carry the header GraphQL-Preflight: 1 (or Apollo-Require-Preflight: true), " +
				"which browsers never send cross-site without asking"}
	}
	user := auth.UserFrom(r.Context())
	if user == nil {
		return nil, nil, &requestError{status: http.StatusUnauthorized, code: string(errs.CodeUnauthenticated),
			message: "sign in to send files"}
	}
	slot := t.Uploads.take(user.ID)
	if slot == nil {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Cache-Control", "no-store")
		return nil, nil, &requestError{status: http.StatusTooManyRequests, code: string(errs.CodeRateLimited),
			message: "you are sending " + strconv.Itoa(t.Uploads.max) + " multipart requests to this server already, " +
				"the most it reads at once: send this one when one of them is answered",
			extensions: map[string]any{"retryAfter": 1}}
	}
	defer func() {
		if files == nil {
			slot() // refused: the request is answered without reading more
		}
	}()
	limit := t.maxBodyBytes()
	maxUpload := t.Blobs.MaxUploadSize()
	if r.ContentLength > maxUpload+limit+maxMapBytes {
		return nil, nil, tooLarge(maxUpload)
	}
	rc := http.NewResponseController(w)
	transferBy := time.Now().Add(TransferTimeout)
	_ = rc.SetReadDeadline(transferBy)
	_ = rc.SetWriteDeadline(transferBy)
	body := &budgetBody{r: r.Body}
	r.Body = struct {
		io.Reader
		io.Closer
	}{body, r.Body}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, parseError(http.StatusBadRequest, "the body is not multipart/form-data with a boundary")
	}
	ops, reqErr := readPart(mr, body, "operations", limit)
	if reqErr != nil {
		return nil, nil, reqErr
	}
	p, reqErr := paramsFromJSON(ops)
	if reqErr != nil {
		return nil, nil, reqErr
	}
	m, reqErr := readPart(mr, body, "map", maxMapBytes)
	if reqErr != nil {
		return nil, nil, reqErr
	}
	f := &multipartFiles{blobs: t.Blobs, log: t.Log, reader: mr, body: body, declared: r.ContentLength, slot: slot,
		transferBy: transferBy}
	if f.declared < 0 {
		f.declared = maxUpload // chunked: charged as the largest upload
	}
	if reqErr := f.place(p, m); reqErr != nil {
		return nil, nil, reqErr
	}
	return p, f, nil
}

// tooLarge is the answer to files over MAX_UPLOAD_SIZE: 413, BAD_USER_INPUT
// with extensions.maximum (bytes).
func tooLarge(maximum int64) *requestError {
	return &requestError{status: http.StatusRequestEntityTooLarge, code: string(errs.CodeBadUserInput),
		message: "the files of one request may hold " + strconv.FormatInt(maximum, 10) + " bytes together, " +
			"and these hold more", extensions: map[string]any{"maximum": maximum}}
}

// readPart reads the next part, which must be the form field name, of at most
// limit bytes of UTF-8.
func readPart(mr *multipart.Reader, body *budgetBody, name string, limit int64) ([]byte, *requestError) {
	part, err := nextPart(mr, body, limit)
	if errors.Is(err, errPartHead) {
		return nil, partHeadTooLarge()
	}
	if err != nil || part.FormName() != name {
		return nil, parseError(http.StatusBadRequest, "the multipart request's parts must be operations, then map, "+
			"then the files (the GraphQL multipart request specification); "+name+" is missing")
	}
	b, err := io.ReadAll(io.LimitReader(part, limit+1))
	if err != nil {
		return nil, parseError(http.StatusBadRequest, "the body could not be read")
	}
	if int64(len(b)) > limit {
		return nil, parseError(http.StatusRequestEntityTooLarge, "the "+name+" part is larger than "+
			strconv.FormatInt(limit, 10)+" bytes")
	}
	if !utf8.Valid(b) {
		return nil, parseError(http.StatusBadRequest, "the "+name+" part is not valid UTF-8")
	}
	return b, nil
}

// place reads the map part and puts an Upload wherever it says a file goes:
// each place must be a null of the variables ("variables.file",
// "variables.input.files.0").
func (f *multipartFiles) place(p *graphql.RawParams, raw []byte) *requestError {
	if !jsoncanon.WithinItems(raw, MaxJSONItems) {
		return parseError(http.StatusBadRequest, tooManyItems("the map part"))
	}
	var m map[string][]string
	if err := decodeObject(string(raw), &m); err != nil {
		return parseError(http.StatusBadRequest, `the map part is not a JSON object of arrays of paths, like {"0": ["variables.file"]}`)
	}
	if len(m) > maxUploadFiles {
		return &requestError{status: http.StatusBadRequest, code: string(errs.CodeBadUserInput),
			message: "one request may carry " + strconv.Itoa(maxUploadFiles) + " files at most"}
	}
	for key, paths := range m {
		if len(paths) == 0 || len(paths) > maxUploadPaths {
			return parseError(http.StatusBadRequest, fmt.Sprintf("the map gives file %q %d places: give it 1 to %d",
				key, len(paths), maxUploadPaths))
		}
		u := &upload{key: key, file: &store.UploadedFile{}}
		for _, path := range paths {
			if err := setNull(p.Variables, path, store.Upload{UploadedFile: u.file}); err != nil {
				return parseError(http.StatusBadRequest, fmt.Sprintf("the map's path %q of file %q: %v", path, key, err))
			}
		}
		f.uploads = append(f.uploads, u)
	}
	return nil
}

// setNull replaces the null at path ("variables.a.0.b") of vars with v.
func setNull(vars map[string]any, path string, v any) error {
	rest, ok := strings.CutPrefix(path, "variables.")
	if !ok {
		return errors.New(`it must start with "variables." (batched operations are not supported)`)
	}
	steps := strings.Split(rest, ".")
	var cur any = vars
	for i, step := range steps {
		last := i == len(steps)-1
		switch c := cur.(type) {
		case map[string]any:
			next, found := c[step]
			if !found {
				return errors.New("the variables have nothing there")
			}
			if last {
				if next != nil {
					return errors.New("the variables must hold null where a file goes")
				}
				c[step] = v
				return nil
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(step)
			if err != nil || n < 0 || n >= len(c) {
				return errors.New("the variables have nothing there")
			}
			if last {
				if c[n] != nil {
					return errors.New("the variables must hold null where a file goes")
				}
				c[n] = v
				return nil
			}
			cur = c[n]
		default:
			return errors.New("the variables have nothing there")
		}
	}
	return errors.New("the variables have nothing there")
}

// stream reads the file parts into the blob store, at most the store's
// MaxUploadSize bytes together: 413 above it. Every file of the map must come,
// each once.
func (f *multipartFiles) stream(ctx context.Context) *requestError {
	left := f.blobs.MaxUploadSize()
	for {
		part, err := nextPart(f.reader, f.body, left)
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errPartHead) {
			return partHeadTooLarge()
		}
		if err != nil {
			return parseError(http.StatusBadRequest, "the body could not be read as multipart/form-data")
		}
		u := f.find(part.FormName())
		if u == nil {
			return parseError(http.StatusBadRequest, fmt.Sprintf("the part %q is not a file of the map, or came twice", part.FormName()))
		}
		staged, err := f.blobs.Stage(ctx, part, part.FileName(), left)
		switch {
		case errors.Is(err, blobs.ErrTooLarge):
			return tooLarge(f.blobs.MaxUploadSize())
		case errors.Is(err, blobs.ErrRead):
			return parseError(http.StatusBadRequest, "the body could not be read")
		case err != nil:
			if e := unavailable(ctx, f.log, err, "part", part.FormName()); e != nil {
				return &requestError{status: http.StatusServiceUnavailable, code: string(e.Code), message: e.Message,
					extensions: e.Extensions}
			}
			f.log.ErrorContext(ctx, "upload: could not store a file", "err", err)
			return &requestError{status: http.StatusServiceUnavailable, code: string(errs.CodeInternal),
				message: "the file could not be stored: retry later"}
		}
		*u.file, u.staged = *staged, true
		left -= staged.Size
	}
	for _, u := range f.uploads {
		if !u.staged {
			return parseError(http.StatusBadRequest, fmt.Sprintf("the file %q of the map is missing", u.key))
		}
	}
	return nil
}

// find returns the file of the map named key that has not come yet.
func (f *multipartFiles) find(key string) *upload {
	for _, u := range f.uploads {
		if u.key == key && !u.staged {
			return u
		}
	}
	return nil
}

// release deletes the staged files no attachment adopted, and gives back
// the request's upload slot: nothing more of its body is read.
func (f *multipartFiles) release(ctx context.Context) {
	defer f.slot()
	for _, u := range f.uploads {
		if u.staged {
			f.blobs.Release(ctx, u.file)
			u.staged = false
		}
	}
}

// paramsFromJSON reads the JSON of a POST body, or of a multipart request's
// operations part.
func paramsFromJSON(body []byte) (*graphql.RawParams, *requestError) {
	if !utf8.Valid(body) {
		return nil, parseError(http.StatusBadRequest, "the body is not valid UTF-8")
	}
	if !jsoncanon.WithinItems(body, MaxJSONItems) {
		return nil, parseError(http.StatusBadRequest, tooManyItems("the body"))
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return nil, parseError(http.StatusBadRequest, "batched operations are not supported: send one operation per request")
	}
	b, err := decodeBody(body)
	if err != nil {
		return nil, parseError(http.StatusBadRequest, "the body is not a JSON object {query, variables, operationName, extensions}")
	}
	p := &graphql.RawParams{Variables: b.Variables, Extensions: b.Extensions}
	if b.Query != nil {
		p.Query = *b.Query
	}
	if p.Query == "" && !persisted(p.Extensions) {
		return nil, parseError(http.StatusBadRequest, "the query is missing")
	}
	if b.OperationName != nil {
		p.OperationName = *b.OperationName
	}
	return p, nil
}
