// Package playground serves TaskFlow's GraphQL playground: GraphiQL with the
// TaskFlow example tabs, bundled from npm packages by web/playground (see
// docs/playground.md) and embedded in the binary, so that a server in a closed
// network still shows a working playground. Nothing is loaded from another
// origin; the page's Content-Security-Policy forbids it.
package playground

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// The bundle is embedded once, gzipped (the build writes only the .gz files):
// nearly every browser accepts gzip, and the rare client that does not gets
// it decompressed on its first request.
//
//go:embed assets/playground.js.gz assets/playground.css.gz
var files embed.FS

// AssetPrefix is the URL path under which the bundle files are served.
const AssetPrefix = "/playground/assets/"

// ContentSecurityPolicy is the policy of the playground page: scripts, styles,
// fonts and requests from the page's own origin only (inline styles and data:
// fonts and images are what GraphiQL's CSS and editors use).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; " +
	"base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

// asset is one embedded bundle file with its content hash.
type asset struct {
	name        string
	contentType string
	gzipped     []byte
	// plain decompresses gzipped once, for clients that do not accept gzip.
	plain   func() []byte
	etag    string
	version string
}

// Tab is an example tab the playground opens with (GraphiQL's defaultTabs).
type Tab struct {
	// Name is a title for the tab; GraphiQL shows the operation's name.
	Name string `json:"name,omitempty"`
	// Query is the GraphQL document, with its comments.
	Query string `json:"query"`
	// Variables is a JSON object of example variables, or "".
	Variables string `json:"variables,omitempty"`
	// Headers is a JSON object of the tab's request headers, or "" for the
	// default: an Authorization header with a placeholder to replace.
	Headers string `json:"headers,omitempty"`
}

// Handler serves the playground page and its assets.
type Handler struct {
	page   []byte
	etag   string
	assets map[string]*asset
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<link rel="icon" href="data:,">
<title>TaskFlow GraphQL playground</title>
<link rel="stylesheet" href="{{.CSS}}">
</head>
<body>
<div id="graphiql">Loading the TaskFlow playground…</div>
{{with .Tabs}}<script type="application/json" id="taskflow-tabs">{{.}}</script>
{{end}}<script src="{{.JS}}"></script>
</body>
</html>
`))

// New returns the playground handler built from the embedded bundle, opening
// with the given example tabs (none: the bundle's own audit-history examples,
// web/playground/src/examples.js). The bundle is hashed once per process,
// however many handlers are made.
func New(tabs ...Tab) *Handler {
	h := &Handler{assets: embedded()}
	data := map[string]any{"JS": h.URL("playground.js"), "CSS": h.URL("playground.css")}
	if len(tabs) > 0 {
		// json.Marshal escapes <, > and &, so no "</script>" can end the
		// data block early.
		b, err := json.Marshal(tabs)
		if err != nil {
			panic(err)
		}
		data["Tabs"] = template.JS(b)
	}
	var page bytes.Buffer
	if err := pageTemplate.Execute(&page, data); err != nil {
		panic(err)
	}
	h.page = page.Bytes()
	sum := sha256.Sum256(h.page)
	h.etag = `"` + hex.EncodeToString(sum[:8]) + `"`
	return h
}

// embedded reads the bundle files once per process.
var embedded = sync.OnceValue(func() map[string]*asset {
	assets := map[string]*asset{}
	for _, name := range []string{"playground.js", "playground.css"} {
		gzipped, err := fs.ReadFile(files, "assets/"+name+".gz")
		if err != nil {
			panic(fmt.Sprintf("playground: embedded %s.gz missing: %v", name, err))
		}
		// The build gzips with a fixed mtime, so the compressed bytes change
		// exactly when the content does: their hash is the version.
		sum := sha256.Sum256(gzipped)
		v := hex.EncodeToString(sum[:8])
		ct := "text/javascript; charset=utf-8"
		if path.Ext(name) == ".css" {
			ct = "text/css; charset=utf-8"
		}
		assets[name] = &asset{name: name, contentType: ct, gzipped: gzipped,
			plain: sync.OnceValue(func() []byte { return gunzip(name, gzipped) }),
			etag:  `"` + v + `"`, version: v}
	}
	return assets
})

// gunzip decompresses an embedded file; the build made it, so it cannot fail.
func gunzip(name string, gz []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		panic(fmt.Sprintf("playground: embedded %s.gz: %v", name, err))
	}
	var out bytes.Buffer
	if _, err := out.ReadFrom(zr); err != nil {
		panic(fmt.Sprintf("playground: embedded %s.gz: %v", name, err))
	}
	return out.Bytes()
}

// URL returns the versioned URL path of the named asset ("playground.js" or
// "playground.css"); the version is the hash of its content, so the URL can be
// cached forever.
func (h *Handler) URL(name string) string {
	a := h.assets[name]
	if a == nil {
		return ""
	}
	return AssetPrefix + a.name + "?v=" + a.version
}

// Register adds the playground's routes to mux: GET / (the page) and
// GET /playground/assets/ (the bundle).
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", h.ServePage)
	mux.HandleFunc("GET "+AssetPrefix+"{name}", h.ServeAsset)
}

// ServePage writes the playground's HTML page. It is revalidated on every
// visit (Cache-Control: no-cache, with an ETag), so a new build of the server
// shows its new bundle at once.
func (h *Handler) ServePage(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("ETag", h.etag)
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(h.page))
}

// ServeAsset writes one bundle file. With the current version in its query
// (the URL the page links) it is cacheable for a year and immutable; any other
// request for it must revalidate by ETag.
func (h *Handler) ServeAsset(w http.ResponseWriter, r *http.Request) {
	a := h.assets[r.PathValue("name")]
	if a == nil {
		http.NotFound(w, r)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("ETag", a.etag)
	hdr.Set("X-Content-Type-Options", "nosniff")
	if strings.TrimSpace(r.URL.Query().Get("v")) == a.version {
		hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hdr.Set("Cache-Control", "no-cache")
	}
	hdr.Set("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		hdr.Set("Content-Encoding", "gzip")
		hdr.Set("ETag", strings.TrimSuffix(a.etag, `"`)+`-gz"`)
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.gzipped))
		return
	}
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.plain()))
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}
