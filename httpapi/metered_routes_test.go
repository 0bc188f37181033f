package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
	"taskflow/store"
)

// budgetLimiter is an in-process limiter with cfg for one test.
func budgetLimiter(t *testing.T, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(ratelimit.Options{Config: cfg, KeyPrefix: ratelimittest.Prefix(), Log: quiet,
		Registerer: prometheus.NewRegistry(), ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	return lim
}

// send sends method path with the token ("" for none) and headers.
func send(t *testing.T, env *apitest.Env, method, path, token string, headers ...string) *apitest.Response {
	t.Helper()
	req, err := http.NewRequest(method, env.Server.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	apitest.SetHeaders(req, token, headers...)
	return env.Do(t, req)
}

// left is the points left of u's budget, read from the RateLimit header of a
// query of cost 1 (so one less than before it).
func left(t *testing.T, env *apitest.Env, u apitest.User) int {
	t.Helper()
	r := env.Post(t, u.Token, cheap, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("a cheap query: %d %s", r.Status, r.Raw)
	}
	n, _ := rateLimitHeader(t, r)
	return n
}

// expectRateLimited fails unless r is /query's 429: Retry-After, no-store,
// the RateLimit headers, and the RATE_LIMITED body with retryAfter, as JSON,
// and nothing else.
func expectRateLimited(t *testing.T, what string, r *apitest.Response) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("%s: %d %.200q, want 429", what, r.Status, r.Raw)
	}
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || retry < 1 {
		t.Fatalf("%s: Retry-After %q", what, r.Header.Get("Retry-After"))
	}
	if r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: Cache-Control %q, Content-Type %q", what, r.Header.Get("Cache-Control"), r.Header.Get("Content-Type"))
	}
	for _, h := range []string{"Content-Disposition", "Content-Range", "ETag", "Last-Modified", "Accept-Ranges"} {
		if v := r.Header.Get(h); v != "" {
			t.Fatalf("%s: a 429 with %s: %q", what, h, v)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatalf("%s: %q: %v", what, r.Raw, err)
	}
	want := map[string]any{"errors": []any{map[string]any{
		"message":    "Too many requests, retry later",
		"extensions": map[string]any{"code": "RATE_LIMITED", "retryAfter": float64(retry)},
	}}}
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("%s: 429 body %s", what, r.Raw)
	}
	rateLimitHeader(t, r)
}

// Downloads are charged to the downloader's cost budget: one point per 64 KiB
// of the bytes sent (the range's for a Range request), at least 1; a HEAD, a
// 304 and a non-member's 404 cost 1. A budget that cannot pay is /query's 429
// and nothing of the file is sent; every answer carries the RateLimit headers.
func TestDownloadsAreCharged(t *testing.T) {
	t.Parallel()
	// No refill within the test: exact counts.
	lim := budgetLimiter(t, ratelimit.Config{Points: 1000, Window: 1000 * time.Hour})
	e := newFilesEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	content := bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16) // 200 KiB: 4 points
	a := attached(t, e.upload(t, e.owner, e.task, "digits.txt", content, ""))
	path := blobs.DownloadPath(a.ID)

	expect := func(what string, r *apitest.Response, status, remaining int) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: %d %.200q, want %d", what, r.Status, r.Raw, status)
		}
		if n, _ := rateLimitHeader(t, r); n != remaining {
			t.Fatalf("%s: RateLimit r=%d, want %d", what, n, remaining)
		}
	}
	r := send(t, e.Env, http.MethodGet, path, e.member.Token)
	expect("a download", r, http.StatusOK, 996)
	if !bytes.Equal(r.Raw, content) || r.Header.Get("RateLimit-Policy") != `"cost";q=1000;w=3600000` {
		t.Fatalf("a download: %d bytes, policy %q", len(r.Raw), r.Header.Get("RateLimit-Policy"))
	}
	r = send(t, e.Env, http.MethodGet, path, e.member.Token, "Range", "bytes=0-65536") // 64 KiB and a byte: 2
	expect("a range", r, http.StatusPartialContent, 994)
	r = send(t, e.Env, http.MethodGet, path, e.member.Token, "Range", "bytes=10-19")
	expect("a small range", r, http.StatusPartialContent, 993)
	expect("HEAD", send(t, e.Env, http.MethodHead, path, e.member.Token), http.StatusOK, 992)
	expect("If-None-Match", send(t, e.Env, http.MethodGet, path, e.member.Token, "If-None-Match", `"`+a.SHA256+`"`),
		http.StatusNotModified, 991)
	// A stranger's 404 costs 1, as an unknown id does: it tells nothing.
	expect("a stranger", send(t, e.Env, http.MethodGet, path, e.stranger.Token), http.StatusNotFound, 999)
	expect("an unknown id", send(t, e.Env, http.MethodGet, blobs.DownloadPath(e.task), e.stranger.Token), http.StatusNotFound, 998)
	// Refused before any lookup: nothing to charge, no one to charge.
	if r := send(t, e.Env, http.MethodGet, path, ""); r.Status != http.StatusUnauthorized || r.Header.Get("RateLimit") != "" {
		t.Fatalf("no token, no link: %d %v", r.Status, r.Header)
	}
	if got := left(t, e.Env, e.member); got != 990 {
		t.Fatalf("the member's budget after the downloads: %d, want 990", got)
	}
}

// Repeated downloads end in 429 with Retry-After, and nothing streamed: a
// budget that pays the request's first point but not the file's size keeps
// that point, and a range it can pay is still served.
func TestRepeatedDownloadsEndIn429(t *testing.T) {
	t.Parallel()
	lim := budgetLimiter(t, ratelimit.Config{Points: 10, Window: 1000 * time.Hour})
	e := newFilesEnv(t, func(o *httpapi.Options) { o.Limiter = apitest.Unlimited() })
	content := bytes.Repeat([]byte{'x'}, 200<<10) // 4 points
	a := attached(t, e.upload(t, e.owner, e.task, "x.bin", content, ""))
	// The same database behind a limited handler: the upload was not charged.
	limited := apitest.NewOn(t, e.DB, func(o *httpapi.Options) { o.Limiter = lim; o.Blobs = e.Blobs })
	path := blobs.DownloadPath(a.ID)
	for i := range 2 {
		if r := send(t, limited, http.MethodGet, path, e.member.Token); r.Status != http.StatusOK || !bytes.Equal(r.Raw, content) {
			t.Fatalf("download %d: %d, %d bytes", i, r.Status, len(r.Raw))
		}
	}
	// 2 points left: the file's 4 do not fit.
	r := send(t, limited, http.MethodGet, path, e.member.Token)
	expectRateLimited(t, "a download over budget", r)
	if bytes.Contains(r.Raw, content[:64]) || r.Header.Get("Content-Length") != strconv.Itoa(len(r.Raw)) {
		t.Fatalf("a refused download sent %d bytes (Content-Length %q)", len(r.Raw), r.Header.Get("Content-Length"))
	}
	if n, _ := rateLimitHeader(t, r); n != 1 {
		t.Fatalf("RateLimit r=%d after a refused download, want 1 (its first point kept)", n)
	}
	if r := send(t, limited, http.MethodGet, path, e.member.Token, "Range", "bytes=0-9"); r.Status != http.StatusPartialContent ||
		string(r.Raw) != "xxxxxxxxxx" {
		t.Fatalf("a range the last point pays: %d %q", r.Status, r.Raw)
	}
	expectRateLimited(t, "a range with nothing left", send(t, limited, http.MethodGet, path, e.member.Token, "Range", "bytes=0-9"))
	if r := send(t, limited, http.MethodHead, path, e.member.Token); r.Status != http.StatusTooManyRequests ||
		r.Header.Get("Retry-After") == "" || r.Header.Get("ETag") != "" {
		t.Fatalf("HEAD with nothing left: %d %v", r.Status, r.Header)
	}
	// The refusal is the member's: another member downloads.
	if r := send(t, limited, http.MethodGet, path, e.viewer.Token); r.Status != http.StatusOK {
		t.Fatalf("the viewer's download: %d", r.Status)
	}
}

// A download through a signed link (no Authorization header) is charged to the
// user the link was signed for.
func TestSignedLinkDownloadChargesTheLinksUser(t *testing.T) {
	t.Parallel()
	lim := budgetLimiter(t, ratelimit.Config{Points: 1000, Window: 1000 * time.Hour})
	e := newFilesEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	content := bytes.Repeat([]byte{'y'}, 100<<10) // 2 points
	a := attached(t, e.upload(t, e.owner, e.task, "y.bin", content, ""))
	var link struct {
		Task struct{ Attachments struct{ Nodes []attachment } }
	}
	res := e.Post(t, e.viewer.Token, `query($t: ID!) { task(id: $t) { attachments { nodes { id downloadUrl } } } }`,
		map[string]any{"t": e.task})
	if err := json.Unmarshal(res.Body.Data, &link); err != nil || len(link.Task.Attachments.Nodes) != 1 ||
		link.Task.Attachments.Nodes[0].ID != a.ID || !strings.Contains(link.Task.Attachments.Nodes[0].DownloadURL, e.viewer.ID) {
		t.Fatalf("the viewer's link: %s", res.Raw)
	}
	before := left(t, e.Env, e.viewer)
	r := send(t, e.Env, http.MethodGet, link.Task.Attachments.Nodes[0].DownloadURL, "")
	if r.Status != http.StatusOK || !bytes.Equal(r.Raw, content) {
		t.Fatalf("the link: %d, %d bytes", r.Status, len(r.Raw))
	}
	if n, _ := rateLimitHeader(t, r); n != before-2 {
		t.Fatalf("RateLimit r=%d after the link's download, want the viewer's %d", n, before-2)
	}
	if got := left(t, e.Env, e.viewer); got != before-3 {
		t.Fatalf("the viewer's budget: %d, want %d", got, before-3)
	}
}

// The limiter's fail-open policy holds for downloads as for /query: with
// Redis cut off they are served and still limited, in process.
func TestDownloadsFailOpenWithoutRedis(t *testing.T) {
	t.Parallel()
	redisSrv := ratelimittest.StartRedis(t)
	lim, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Points: 5, Window: 1000 * time.Hour},
		Redis: redisSrv.Client(), KeyPrefix: ratelimittest.Prefix(), Log: quiet, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	e := newFilesEnv(t, func(o *httpapi.Options) { o.Limiter = apitest.Unlimited() })
	a := attached(t, e.upload(t, e.owner, e.task, "z.txt", []byte("zzz"), ""))
	limited := apitest.NewOn(t, e.DB, func(o *httpapi.Options) { o.Limiter = lim; o.Blobs = e.Blobs })
	path := blobs.DownloadPath(a.ID)
	if r := send(t, limited, http.MethodGet, path, e.member.Token); r.Status != http.StatusOK {
		t.Fatalf("with Redis: %d", r.Status)
	}
	redisSrv.Stop()
	var statuses []int
	for range 6 {
		r := send(t, limited, http.MethodGet, path, e.member.Token)
		if r.Header.Get("RateLimit") == "" {
			t.Fatalf("no RateLimit header with Redis down: %d %v", r.Status, r.Header)
		}
		statuses = append(statuses, r.Status)
	}
	if st := lim.Status(); st.Backend != "memory-fallback" {
		t.Fatalf("status %+v", st)
	}
	if statuses[0] != http.StatusOK || statuses[5] != http.StatusTooManyRequests {
		t.Fatalf("with Redis down: %v, want served, then limited in process", statuses)
	}
}

// exportEvents inserts n events of ws, a second apart.
func exportEvents(t *testing.T, e *auditEnv, ws string, actor apitest.User, n int) {
	t.Helper()
	if _, err := e.DB.Pool.Exec(t.Context(), `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action,
		entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid, 'task.created', 'task', 't' || i,
			'2026-05-01T00:00:00Z'::timestamptz + i * interval '1 second', '{}'::jsonb
		FROM generate_series(1, $3::int) i`, ws, actor.ID, n); err != nil {
		t.Fatal(err)
	}
}

// ndjsonLines counts the lines of an NDJSON export.
func ndjsonLines(t *testing.T, raw []byte) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var ev store.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		n++
	}
	return n
}

// An export costs 1 point, and 100 for each page of up to 100 events it
// reads, as auditEvents(first: 100) { nodes } costs 101 a page on /query; the
// first page's before the first byte. A HEAD, a 403 and a 404 cost 1.
func TestExportsAreCharged(t *testing.T) {
	t.Parallel()
	lim := budgetLimiter(t, ratelimit.Config{Points: 1000, Window: 1000 * time.Hour})
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	exportEvents(t, e, e.ws, e.owner, 250) // three pages
	exportEvents(t, e, e.other, e.stranger, 100)

	path := "/audit/export?" + url.Values{"workspaceId": {e.ws}}.Encode()
	r := send(t, e.Env, http.MethodGet, path, e.admin.Token)
	if r.Status != http.StatusOK || ndjsonLines(t, r.Raw) != 250 {
		t.Fatalf("export: %d %.200q", r.Status, r.Raw)
	}
	if n, _ := rateLimitHeader(t, r); n != 899 { // the headers go with the first page
		t.Fatalf("RateLimit r=%d on the export, want 899", n)
	}
	if got := left(t, e.Env, e.admin); got != 1000-301-1 {
		t.Fatalf("the admin's budget after an export of three pages: %d, want %d", got, 1000-301-1)
	}
	// HEAD checks access and reads no page.
	r = send(t, e.Env, http.MethodHead, path, e.admin.Token)
	if r.Status != http.StatusOK || r.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("HEAD: %d %v", r.Status, r.Header)
	}
	if n, _ := rateLimitHeader(t, r); n != 697 {
		t.Fatalf("RateLimit r=%d after HEAD, want 697", n)
	}
	if r := send(t, e.Env, http.MethodHead, path, e.stranger.Token); r.Status != http.StatusNotFound {
		t.Fatalf("a stranger's HEAD: %d", r.Status)
	}
	// Refusals cost 1, whatever the workspace.
	for _, c := range []struct {
		who    apitest.User
		ws     string
		status int
	}{{e.member, e.ws, 403}, {e.stranger, e.ws, 404}, {e.stranger, e.other, 200}} {
		r := send(t, e.Env, http.MethodGet, "/audit/export?"+url.Values{"workspaceId": {c.ws}}.Encode(), c.who.Token)
		if r.Status != c.status || r.Header.Get("RateLimit") == "" || c.status == 200 && ndjsonLines(t, r.Raw) != 100 {
			t.Fatalf("%s: %d %v", c.ws, r.Status, r.Header)
		}
	}
	if got := left(t, e.Env, e.member); got != 998 {
		t.Fatalf("the member's budget after a 403: %d, want 998", got)
	}
	// The stranger's 404 (1), HEAD's 404 (1) and export of the 100 events of
	// their own workspace: one page, 1 + 100 (a full last page reads no
	// empty page after it).
	if got := left(t, e.Env, e.stranger); got != 1000-103-1 {
		t.Fatalf("the stranger's budget: %d, want %d", got, 1000-103-1)
	}
}

// Repeated exports end in 429: /query's answer, before the first byte.
func TestRepeatedExportsEndIn429(t *testing.T) {
	t.Parallel()
	lim := budgetLimiter(t, ratelimit.Config{Points: 250, Window: 1000 * time.Hour})
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	exportEvents(t, e, e.ws, e.owner, 50) // one page: 101 points
	path := "/audit/export?" + url.Values{"workspaceId": {e.ws}, "format": {"csv"}}.Encode()
	for i := range 2 {
		if r := send(t, e.Env, http.MethodGet, path, e.owner.Token); r.Status != http.StatusOK {
			t.Fatalf("export %d: %d %q", i, r.Status, r.Raw)
		}
	}
	r := send(t, e.Env, http.MethodGet, path, e.owner.Token)
	expectRateLimited(t, "the third export", r)
	if n, _ := rateLimitHeader(t, r); n != 250-202-1 {
		t.Fatalf("RateLimit r=%d, want %d (the request's point kept)", n, 250-202-1)
	}
	if strings.Contains(string(r.Raw), "occurredAt") {
		t.Fatalf("a refused export sent rows: %q", r.Raw)
	}
}

// A budget that pays an export's first page but not its others paces it:
// each later page waits for the budget, and the export ends complete, never
// cut short.
func TestExportsArePacedByTheBudget(t *testing.T) {
	t.Parallel()
	// 150 points a second: an export of 250 events (301 points) after a full
	// budget waits for 151 points, about a second.
	lim := budgetLimiter(t, ratelimit.Config{Points: 150, Window: time.Second})
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	exportEvents(t, e, e.ws, e.owner, 250)
	path := "/audit/export?" + url.Values{"workspaceId": {e.ws}}.Encode()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodGet, e.Server.URL+path, nil)
	apitest.SetHeaders(req, e.owner.Token)
	res, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	first, err := br.ReadBytes('\n')
	if res.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("a paced export: %d %q %v", res.StatusCode, first, err)
	}
	firstAt := time.Since(start)
	rest, err := io.ReadAll(br)
	took := time.Since(start)
	if err != nil || ndjsonLines(t, append(first, rest...)) != 250 {
		t.Fatalf("a paced export: %v, %q", err, rest)
	}
	// The pages read are sent before the export waits for the next.
	if took < 700*time.Millisecond || took-firstAt < 500*time.Millisecond {
		t.Fatalf("an export of 301 points on a budget of 150 a second: the first event after %v, the end after %v", firstAt, took)
	}
}

// A paced export outlasts the server's WriteTimeout (60 s in server.go, 1 s
// here): each page has a write deadline of its own, so the export ends
// complete however long its user's budget makes it.
func TestPacedExportOutlastsTheWriteTimeout(t *testing.T) {
	t.Parallel()
	// 100 points a second: 350 events (1 + 4 pages of 100 points) take about
	// three seconds after the first page.
	lim := budgetLimiter(t, ratelimit.Config{Points: 101, Window: time.Second})
	e := newAuditEnv(t, func(o *httpapi.Options) { o.Limiter = lim })
	exportEvents(t, e, e.ws, e.owner, 350)
	srv := httptest.NewUnstartedServer(e.Handler)
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/audit/export?"+url.Values{"workspaceId": {e.ws}}.Encode(), nil)
	apitest.SetHeaders(req, e.owner.Token)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("a paced export past the write timeout: %d, %v after %d bytes", res.StatusCode, err, len(body))
	}
	if n := ndjsonLines(t, body); n != 350 {
		t.Fatalf("a paced export past the write timeout: %d events, want 350", n)
	}
}
