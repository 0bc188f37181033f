package playground_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"taskflow/httpapi/playground"
)

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	playground.New().Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Without an explicit Accept-Encoding Go's transport would ask for gzip
	// and decode it silently; the tests want to see what the server sends.
	req.Header.Set("Accept-Encoding", "identity")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

var (
	scriptSrc = regexp.MustCompile(`<script[^>]*\ssrc="([^"]+)"`)
	linkHref  = regexp.MustCompile(`<link rel="stylesheet"[^>]*\shref="([^"]+)"`)
	anyURL    = regexp.MustCompile(`\s(?:src|href)="([^"]*)"`)
)

// cdnHosts are the hosts GraphiQL's own instructions (and fonts) load from.
var cdnHosts = []string{"unpkg.com", "jsdelivr", "cdnjs", "esm.sh", "esm.run", "skypack", "googleapis", "gstatic"}

// cdnHost returns the first CDN host that b mentions, or "".
func cdnHost(b []byte) string {
	lower := bytes.ToLower(b)
	for _, h := range cdnHosts {
		if bytes.Contains(lower, []byte(h)) {
			return h
		}
	}
	return ""
}

// The page links only its own embedded bundle and nothing from another origin.
func TestPageLinksOnlyEmbeddedAssets(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	res, body := get(t, srv, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control = %q", cc)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	page := string(body)
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Contains(page, `"//`) {
		t.Errorf("page references another origin:\n%s", page)
	}
	if !strings.Contains(page, `id="graphiql"`) {
		t.Errorf("page has no GraphiQL mount point:\n%s", page)
	}
	for _, m := range anyURL.FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[1], playground.AssetPrefix) && !strings.HasPrefix(m[1], "data:") {
			t.Errorf("page references %q", m[1])
		}
	}
	var urls []string
	for _, m := range scriptSrc.FindAllStringSubmatch(page, -1) {
		urls = append(urls, m[1])
	}
	for _, m := range linkHref.FindAllStringSubmatch(page, -1) {
		urls = append(urls, m[1])
	}
	if len(urls) != 2 {
		t.Fatalf("page links %v, want one script and one stylesheet", urls)
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, playground.AssetPrefix) {
			t.Errorf("page links %q outside %s", u, playground.AssetPrefix)
		}
		res, body := get(t, srv, u)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d", u, res.StatusCode)
		}
		if len(body) < 10_000 {
			t.Errorf("%s is only %d bytes", u, len(body))
		}
		if m := cdnHost(body); m != "" {
			t.Errorf("%s references CDN host %q", u, m)
		}
	}
}

// Assets carry their content types; the versioned URL the page links is
// immutable, any other URL of the same file must revalidate.
func TestAssetHeaders(t *testing.T) {
	t.Parallel()
	h := playground.New()
	srv := newServer(t)
	for name, ct := range map[string]string{
		"playground.js":  "text/javascript; charset=utf-8",
		"playground.css": "text/css; charset=utf-8",
	} {
		res, body := get(t, srv, h.URL(name))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d", h.URL(name), res.StatusCode)
		}
		if got := res.Header.Get("Content-Type"); got != ct {
			t.Errorf("%s Content-Type = %q, want %q", name, got, ct)
		}
		if got := res.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
			t.Errorf("%s Cache-Control = %q", name, got)
		}
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s X-Content-Type-Options = %q", name, got)
		}
		etag := res.Header.Get("ETag")
		if etag == "" {
			t.Fatalf("%s has no ETag", name)
		}
		res, _ = get(t, srv, h.URL(name), "If-None-Match", etag)
		if res.StatusCode != http.StatusNotModified {
			t.Errorf("%s with If-None-Match = %d, want 304", name, res.StatusCode)
		}
		res, _ = get(t, srv, playground.AssetPrefix+name+"?v=stale")
		if got := res.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("%s with a stale version: Cache-Control = %q, want no-cache", name, got)
		}

		// gzip: the same bytes, compressed.
		res, gz := get(t, srv, h.URL(name), "Accept-Encoding", "gzip, br")
		if res.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s with Accept-Encoding gzip: Content-Encoding = %q", name, res.Header.Get("Content-Encoding"))
		}
		if len(gz) >= len(body) {
			t.Errorf("%s gzipped is %d bytes, plain %d", name, len(gz), len(body))
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(plain, body) {
			t.Errorf("%s gzipped does not decode to the plain file", name)
		}
		if res.Header.Get("ETag") == etag {
			t.Errorf("%s: gzip and identity share the ETag %s", name, etag)
		}
	}
}

func TestUnknownPathsAreNotFound(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	for _, p := range []string{"/playground/assets/nope.js", "/playground/assets/", "/index.html", "/favicon.ico"} {
		res, _ := get(t, srv, p)
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", p, res.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader("{}"))
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d, want 405", res.StatusCode)
	}
}

// Example tabs given by the server reach the page as an inert JSON data block
// that cannot end the script element early.
func TestTabsDataBlock(t *testing.T) {
	t.Parallel()
	tabs := []playground.Tab{
		{Name: "Recent", Query: "query Recent($workspaceId: ID!) { auditEvents(workspaceId: $workspaceId) { nodes { action } } }", Variables: `{"workspaceId": ""}`},
		{Query: "# </script><script>alert(1)</script>\nquery Me { me { id } }"},
	}
	mux := http.NewServeMux()
	playground.New(tabs...).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, body := get(t, srv, "/")
	page := string(body)
	block := regexp.MustCompile(`(?s)<script type="application/json" id="taskflow-tabs">(.*?)</script>`).FindStringSubmatch(page)
	if block == nil {
		t.Fatalf("no tabs data block in:\n%s", page)
	}
	var got []playground.Tab
	if err := json.Unmarshal([]byte(block[1]), &got); err != nil {
		t.Fatalf("data block %q: %v", block[1], err)
	}
	if len(got) != 2 || got[0] != tabs[0] || got[1] != tabs[1] {
		t.Errorf("data block holds %+v, want %+v", got, tabs)
	}
	if strings.Count(page, "<script") != 2 {
		t.Errorf("page has %d script elements, want the data block and the bundle:\n%s", strings.Count(page, "<script"), page)
	}

	// Without tabs the page has no data block (the bundle's examples open).
	_, body = get(t, newServer(t), "/")
	if strings.Contains(string(body), "taskflow-tabs") {
		t.Errorf("page without tabs has a data block:\n%s", body)
	}
}
