package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
	"taskflow/store"
)

// filesEnv is an API with a workspace of an owner, a member, a viewer and an
// admin, a project and a task; stranger is in another workspace.
type filesEnv struct {
	*apitest.Env
	owner, admin, member, viewer, stranger apitest.User
	ws, task, otherTask                    string
}

func newFilesEnv(t *testing.T, opts ...apitest.Option) *filesEnv {
	t.Helper()
	e := &filesEnv{Env: apitest.New(t, opts...)}
	e.owner, e.admin, e.member = e.NewUser(t, "Owner"), e.NewUser(t, "Admin"), e.NewUser(t, "Member")
	e.viewer, e.stranger = e.NewUser(t, "Viewer"), e.NewUser(t, "Stranger")
	ctx := context.Background()
	q := func(sql string, args ...any) string {
		t.Helper()
		var id string
		if err := e.DB.Pool.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	e.ws = q(`INSERT INTO workspaces (name) VALUES ('w') RETURNING id`)
	for u, r := range map[apitest.User]store.Role{e.owner: store.RoleOwner, e.admin: store.RoleAdmin,
		e.member: store.RoleMember, e.viewer: store.RoleViewer} {
		q(`INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, $3) RETURNING user_id`, e.ws, u.ID, r)
	}
	project := q(`INSERT INTO projects (workspace_id, name) VALUES ($1, 'p') RETURNING id`, e.ws)
	e.task = q(`INSERT INTO tasks (project_id, workspace_id, title, created_by) VALUES ($1, $2, 't', $3) RETURNING id`,
		project, e.ws, e.owner.ID)
	e.otherTask = q(`INSERT INTO tasks (project_id, workspace_id, title, created_by) VALUES ($1, $2, 'u', $3) RETURNING id`,
		project, e.ws, e.owner.ID)
	other := q(`INSERT INTO workspaces (name) VALUES ('x') RETURNING id`)
	q(`INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER') RETURNING user_id`, other, e.stranger.ID)
	return e
}

// addAttachment is the mutation the tests send.
const addAttachment = `mutation($t: ID!, $f: Upload!, $k: String) {
	addAttachment(taskId: $t, file: $f, idempotencyKey: $k) {
		id filename contentType size sha256 downloadUrl uploader { id } task { id } createdAt
	}
}`

// attachment is Attachment as the tests read it.
type attachment struct {
	ID, Filename, ContentType, SHA256, DownloadURL string
	Size                                           int64
	Uploader, Task                                 struct{ ID string }
}

// upload sends addAttachment with content as the file name to task, with key
// when not "", and returns the raw answer.
func (e *filesEnv) upload(t *testing.T, as apitest.User, task, name string, content []byte, key string, headers ...string) *apitest.Response {
	t.Helper()
	vars := map[string]any{"t": task, "f": nil}
	if key != "" {
		vars["k"] = key
	}
	return e.Upload(t, as.Token, addAttachment, vars, []apitest.File{apitest.BytesFile("f", name, content)}, headers...)
}

// attached decodes a successful addAttachment.
func attached(t *testing.T, res *apitest.Response) attachment {
	t.Helper()
	var data struct{ AddAttachment attachment }
	if err := json.Unmarshal(res.Body.Data, &data); err != nil || res.Code() != "" || res.Status != http.StatusOK {
		t.Fatalf("addAttachment: %d %s", res.Status, res.Raw)
	}
	return data.AddAttachment
}

// get sends GET path with the token ("" for none) and extra headers.
func (e *filesEnv) get(t *testing.T, token, path string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.Server.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	apitest.SetHeaders(req, token, headers...)
	res, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// stored counts the rows of attachments, blobs and registrations, and the
// objects of the blob store.
func (e *filesEnv) stored(t *testing.T) (attachments, blobRows, uploads, objects int) {
	t.Helper()
	ctx := context.Background()
	if err := e.DB.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM attachments), (SELECT count(*) FROM attachment_blobs),
		(SELECT count(*) FROM blob_uploads)`).Scan(&attachments, &blobRows, &uploads); err != nil {
		t.Fatal(err)
	}
	keys, err := e.Blobs.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return attachments, blobRows, uploads, len(keys)
}

// expectStored fails unless the counts of stored are the given ones.
func (e *filesEnv) expectStored(t *testing.T, attachments, blobRows, uploads, objects int) {
	t.Helper()
	a, b, u, o := e.stored(t)
	if a != attachments || b != blobRows || u != uploads || o != objects {
		t.Fatalf("stored %d attachments, %d blobs, %d uploads, %d objects; want %d, %d, %d, %d",
			a, b, u, o, attachments, blobRows, uploads, objects)
	}
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// pngBytes is the start of a PNG image followed by filler: sniffed as image/png.
func pngBytes(n int) []byte {
	b := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), bytes.Repeat([]byte{7}, n)...)
	return b
}

// A file sent through real multipart HTTP comes back byte for byte from its
// download link, without an Authorization header, and from the download route
// with one: its SHA-256, size and sniffed type (not the client's) in the
// answer and in the headers, as a download that no browser sniffs.
func TestAttachmentRoundTrip(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := pngBytes(200 << 10)
	a := attached(t, e.upload(t, e.member, e.task, `C:\fakepath\shot "1".png`, content, ""))
	if a.SHA256 != hexSHA(content) || a.Size != int64(len(content)) || a.ContentType != "image/png" ||
		a.Filename != `shot "1".png` || a.Uploader.ID != e.member.ID || a.Task.ID != e.task {
		t.Fatalf("attachment %+v; want sha %s, size %d, image/png", a, hexSHA(content), len(content))
	}
	if !strings.HasPrefix(a.DownloadURL, "/attachments/"+a.ID+"?") {
		t.Fatalf("downloadUrl %q", a.DownloadURL)
	}
	for _, c := range []struct{ token, path string }{{"", a.DownloadURL}, {e.viewer.Token, blobs.DownloadPath(a.ID)}} {
		res, body := e.get(t, c.token, c.path)
		if res.StatusCode != http.StatusOK || !bytes.Equal(body, content) {
			t.Fatalf("GET %s: %d, %d bytes", c.path, res.StatusCode, len(body))
		}
		want := map[string]string{
			"Content-Type":           "image/png",
			"Content-Disposition":    `attachment; filename="shot \"1\".png"`,
			"X-Content-Type-Options": "nosniff",
			"ETag":                   `"` + a.SHA256 + `"`,
			"Content-Length":         fmt.Sprint(len(content)),
			"Accept-Ranges":          "bytes",
		}
		for k, v := range want {
			if got := res.Header.Get(k); got != v {
				t.Errorf("GET %s: %s: %q, want %q", c.path, k, got, v)
			}
		}
	}
	e.expectStored(t, 1, 1, 0, 1)

	var page struct {
		Task struct {
			Attachments struct{ Nodes []attachment }
		}
	}
	res := e.Post(t, e.viewer.Token, `query($t: ID!) { task(id: $t) { attachments { nodes { id sha256 size filename } } } }`,
		map[string]any{"t": e.task})
	if err := json.Unmarshal(res.Body.Data, &page); err != nil || len(page.Task.Attachments.Nodes) != 1 ||
		page.Task.Attachments.Nodes[0].ID != a.ID || page.Task.Attachments.Nodes[0].SHA256 != a.SHA256 {
		t.Fatalf("task attachments: %s", res.Raw)
	}
}

// Retrying addAttachment with the same key and bytes returns the first
// attachment, marked as a replay, and stores nothing new; the same key with
// other bytes, another name or another task is IDEMPOTENCY_KEY_REUSED and
// stores nothing.
func TestAttachmentRetries(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := []byte(strings.Repeat("log line\n", 5000))
	first := attached(t, e.upload(t, e.member, e.task, "build.log", content, "k1"))
	res := e.upload(t, e.member, e.task, "build.log", content, "k1")
	again := attached(t, res)
	if again.ID != first.ID || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %s, replayed %q; want %s", again.ID, res.Header.Get("Idempotent-Replayed"), first.ID)
	}
	e.expectStored(t, 1, 1, 0, 1)
	for name, res := range map[string]*apitest.Response{
		"other bytes": e.upload(t, e.member, e.task, "build.log", append(content, '!'), "k1"),
		"other name":  e.upload(t, e.member, e.task, "other.log", content, "k1"),
		"other task":  e.upload(t, e.member, e.otherTask, "build.log", content, "k1"),
	} {
		if res.Code() != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("%s: %s", name, res.Raw)
		}
	}
	e.expectStored(t, 1, 1, 0, 1)
	var events int
	if err := e.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE action = 'attachment.added'`).Scan(&events); err != nil || events != 1 {
		t.Fatalf("%d attachment.added events (%v), want 1", events, err)
	}
}

// Concurrent uploads with the same key store the file once: one attachment,
// one object; every request answers with that attachment (or
// IDEMPOTENCY_IN_PROGRESS).
func TestAttachmentConcurrentSameKey(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := pngBytes(300 << 10)
	const n = 6
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res := e.upload(t, e.member, e.task, "same.png", content, "same-key")
			if res.Code() == "IDEMPOTENCY_IN_PROGRESS" {
				return
			}
			ids[i] = attached(t, res).ID
		})
	}
	wg.Wait()
	var id string
	for _, got := range ids {
		if got != "" && id != "" && got != id {
			t.Fatalf("answers name two attachments: %v", ids)
		}
		if got != "" {
			id = got
		}
	}
	if id == "" {
		t.Fatal("no upload succeeded")
	}
	e.expectStored(t, 1, 1, 0, 1)
}

// Files over MAX_UPLOAD_SIZE are 413 with the maximum, whether the request
// says so in its Content-Length (refused before it is read) or only its bytes
// do (refused while streaming); either way nothing is stored.
func TestAttachmentOversize(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t, func(o *httpapi.Options) {
		o.Blobs = apitest.OpenBlobs(t, o.DB, func(b *blobs.Options) { b.MaxUploadSize = 4 << 10 })
	})
	attached(t, e.upload(t, e.member, e.task, "fits", make([]byte, 4<<10), ""))
	res := e.upload(t, e.member, e.task, "big", make([]byte, 4<<10+1), "")
	if res.Status != http.StatusRequestEntityTooLarge || res.Code() != "BAD_USER_INPUT" ||
		res.Body.Errors[0]["extensions"].(map[string]any)["maximum"] != float64(4<<10) {
		t.Fatalf("one byte over: %d %s", res.Status, res.Raw)
	}
	// Two files of 3 KiB: 6 KiB together.
	vars := map[string]any{"t": e.task, "f": nil, "g": nil}
	res = e.Upload(t, e.member.Token, `mutation($t: ID!, $f: Upload!, $g: Upload!) {
		a: addAttachment(taskId: $t, file: $f) { id } b: addAttachment(taskId: $t, file: $g) { id } }`, vars,
		[]apitest.File{apitest.BytesFile("f", "a", make([]byte, 3<<10)), apitest.BytesFile("g", "b", make([]byte, 3<<10))})
	if res.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("two files over the bound together: %d %s", res.Status, res.Raw)
	}
	// A declared length far over the bound: refused before the body is read.
	body, ctype, _ := apitest.Multipart(addAttachment, map[string]any{"t": e.task, "f": nil},
		apitest.BytesFile("f", "x", make([]byte, 64)))
	req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/query", body)
	req.ContentLength = 10 << 20
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("GraphQL-Preflight", "1")
	req.Header.Set("Authorization", "Bearer "+e.member.Token)
	if res, err := e.Server.Client().Do(req); err == nil {
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("declared 10 MiB: %d", res.StatusCode)
		}
	}
	e.expectStored(t, 1, 1, 0, 1)
}

// One request carries at most 10 files: 10 are attached, 11 are refused
// with 400 BAD_USER_INPUT before any file is read, and nothing is stored.
func TestAttachmentFilesPerRequestAreBounded(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	send := func(n int) *apitest.Response {
		vars := map[string]any{"t": e.task}
		var defs, fields strings.Builder
		files := make([]apitest.File, n)
		for i := range n {
			f := fmt.Sprintf("f%d", i)
			vars[f] = nil
			fmt.Fprintf(&defs, ", $%s: Upload!", f)
			fmt.Fprintf(&fields, " a%d: addAttachment(taskId: $t, file: $%s) { id }", i, f)
			files[i] = apitest.BytesFile(f, f+".txt", []byte(fmt.Sprintf("file %d of %d", i, n)))
		}
		return e.Upload(t, e.member.Token, "mutation($t: ID!"+defs.String()+") {"+fields.String()+" }", vars, files)
	}
	if res := send(10); res.Status != http.StatusOK || res.Code() != "" {
		t.Fatalf("10 files: %d %s", res.Status, res.Raw)
	}
	e.expectStored(t, 10, 10, 0, 10)
	res := send(11)
	if res.Status != http.StatusBadRequest || res.Code() != "BAD_USER_INPUT" ||
		!strings.Contains(res.Body.Errors[0]["message"].(string), "10 files at most") {
		t.Fatalf("11 files: %d %s", res.Status, res.Raw)
	}
	e.expectStored(t, 10, 10, 0, 10)
}

// A VIEWER cannot attach (FORBIDDEN), a non-member sees no task (NOT_FOUND),
// an anonymous caller is refused before the file is read (401), and so is a
// multipart request without a preflight header (400, against cross-site
// forms); none of them stores anything.
func TestAttachmentRefusals(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := []byte("secret plans")
	for name, c := range map[string]struct {
		res    *apitest.Response
		status int
		code   string
	}{
		"viewer":       {e.upload(t, e.viewer, e.task, "a", content, ""), http.StatusOK, "FORBIDDEN"},
		"stranger":     {e.upload(t, e.stranger, e.task, "a", content, ""), http.StatusOK, "NOT_FOUND"},
		"anonymous":    {e.upload(t, apitest.User{}, e.task, "a", content, ""), http.StatusUnauthorized, "UNAUTHENTICATED"},
		"no preflight": {e.upload(t, e.member, e.task, "a", content, "", "GraphQL-Preflight", ""), http.StatusBadRequest, "BAD_USER_INPUT"},
		"bad task":     {e.upload(t, e.member, "nope", "a", content, ""), http.StatusOK, "NOT_FOUND"},
	} {
		if c.res.Status != c.status || c.res.Code() != c.code {
			t.Errorf("%s: %d %s, want %d %s", name, c.res.Status, c.res.Raw, c.status, c.code)
		}
	}
	e.expectStored(t, 0, 0, 0, 0)
	// Apollo Client's header does as well as GraphQL-Preflight.
	attached(t, e.upload(t, e.member, e.task, "a", content, "", "GraphQL-Preflight", "", "Apollo-Require-Preflight", "true"))
}

// Malformed multipart requests are 400 and store nothing: a map part missing
// or after the files, a path where the variables hold no null, a file part
// the map does not name, a file the map names that never comes; an Upload
// sent as JSON is BAD_USER_INPUT.
func TestAttachmentMalformedMultipart(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	send := func(body, boundary string) *apitest.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/query", strings.NewReader(strings.ReplaceAll(body, "\n", "\r\n")))
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		req.Header.Set("GraphQL-Preflight", "1")
		req.Header.Set("Authorization", "Bearer "+e.member.Token)
		return e.Do(t, req)
	}
	ops := func(vars string) string {
		return `{"query":"mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id } }","variables":` + vars + `}`
	}
	part := func(name, body string) string {
		return "--b\nContent-Disposition: form-data; name=\"" + name + "\"; filename=\"x\"\n\n" + body + "\n"
	}
	okVars := `{"t":"` + e.task + `","f":null}`
	for name, body := range map[string]string{
		"no map":         part("operations", ops(okVars)) + part("0", "data") + "--b--\n",
		"file first":     part("0", "data") + part("operations", ops(okVars)) + "--b--\n",
		"not null":       part("operations", ops(`{"t":"`+e.task+`","f":"x"}`)) + part("map", `{"0":["variables.f"]}`) + part("0", "d") + "--b--\n",
		"no such path":   part("operations", ops(okVars)) + part("map", `{"0":["variables.g.3"]}`) + part("0", "d") + "--b--\n",
		"batched path":   part("operations", ops(okVars)) + part("map", `{"0":["0.variables.f"]}`) + part("0", "d") + "--b--\n",
		"unnamed part":   part("operations", ops(okVars)) + part("map", `{"0":["variables.f"]}`) + part("1", "d") + "--b--\n",
		"missing file":   part("operations", ops(okVars)) + part("map", `{"0":["variables.f"]}`) + "--b--\n",
		"twice":          part("operations", ops(okVars)) + part("map", `{"0":["variables.f"]}`) + part("0", "d") + part("0", "e") + "--b--\n",
		"map not object": part("operations", ops(okVars)) + part("map", `["variables.f"]`) + part("0", "d") + "--b--\n",
		"batch":          part("operations", "["+ops(okVars)+"]") + part("map", `{"0":["variables.f"]}`) + part("0", "d") + "--b--\n",
	} {
		if res := send(body, "b"); res.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, res.Status, res.Raw)
		}
	}
	res := e.Post(t, e.member.Token, `mutation($t: ID!, $f: Upload!) { addAttachment(taskId: $t, file: $f) { id } }`,
		map[string]any{"t": e.task, "f": "aGVsbG8="})
	if res.Code() != "BAD_USER_INPUT" {
		t.Errorf("an Upload as a JSON string: %s", res.Raw)
	}
	e.expectStored(t, 0, 0, 0, 0)
}

// Only members download: a member of another workspace gets 404 with their
// token and with a link made for someone else (or edited), as for an
// attachment that does not exist; a request with neither a token nor a link is
// 401. Ranges are served from the blob store (206), and the ETag answers
// If-None-Match with 304.
func TestAttachmentDownloads(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := []byte(strings.Repeat("0123456789", 1000))
	a := attached(t, e.upload(t, e.member, e.task, "digits.txt", content, ""))
	path := blobs.DownloadPath(a.ID)
	for name, c := range map[string]struct {
		token, path string
		status      int
	}{
		"stranger's token":          {e.stranger.Token, path, http.StatusNotFound},
		"stranger's token and link": {e.stranger.Token, a.DownloadURL, http.StatusNotFound},
		"no token, no link":         {"", path, http.StatusUnauthorized},
		"edited link":               {"", strings.Replace(a.DownloadURL, "u="+e.member.ID, "u="+e.stranger.ID, 1), http.StatusNotFound},
		"link of another id":        {"", strings.Replace(a.DownloadURL, a.ID, e.task, 1), http.StatusNotFound},
		"unknown id":                {e.member.Token, blobs.DownloadPath(e.task), http.StatusNotFound},
		"malformed id":              {e.member.Token, "/attachments/nope", http.StatusNotFound},
	} {
		if res, body := e.get(t, c.token, c.path); res.StatusCode != c.status || bytes.Contains(body, content[:20]) {
			t.Errorf("%s: %d %s, want %d", name, res.StatusCode, body, c.status)
		}
	}
	// A link stops working once its user is no member.
	if _, err := e.DB.Pool.Exec(context.Background(), `DELETE FROM members WHERE user_id = $1`, e.member.ID); err != nil {
		t.Fatal(err)
	}
	if res, _ := e.get(t, "", a.DownloadURL); res.StatusCode != http.StatusNotFound {
		t.Errorf("the link of a removed member: %d", res.StatusCode)
	}

	res, body := e.get(t, e.viewer.Token, path, "Range", "bytes=10-19")
	if res.StatusCode != http.StatusPartialContent || string(body) != "0123456789" ||
		res.Header.Get("Content-Range") != fmt.Sprintf("bytes 10-19/%d", len(content)) {
		t.Fatalf("range: %d %q %s", res.StatusCode, body, res.Header.Get("Content-Range"))
	}
	res, body = e.get(t, e.viewer.Token, path, "Range", fmt.Sprintf("bytes=%d-", len(content)-5), "If-Range", `"`+a.SHA256+`"`)
	if res.StatusCode != http.StatusPartialContent || string(body) != "56789" {
		t.Fatalf("resume (curl -C -): %d %q", res.StatusCode, body)
	}
	res, body = e.get(t, e.viewer.Token, path, "If-None-Match", `"`+a.SHA256+`"`)
	if res.StatusCode != http.StatusNotModified || len(body) != 0 {
		t.Fatalf("If-None-Match: %d, %d bytes", res.StatusCode, len(body))
	}
}

// A workspace's distinct attached files fit its quota: over it, CONFLICT with
// the quota, the room used and the file's size, and nothing stored; the same
// content again costs nothing, and deleting frees the room.
func TestAttachmentQuota(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t, func(o *httpapi.Options) {
		o.Blobs = apitest.OpenBlobs(t, o.DB, func(b *blobs.Options) { b.Quota = 1000 })
	})
	first := attached(t, e.upload(t, e.member, e.task, "a", bytes.Repeat([]byte{'a'}, 600), ""))
	res := e.upload(t, e.member, e.task, "b", bytes.Repeat([]byte{'b'}, 500), "")
	ext, _ := res.Body.Errors[0]["extensions"].(map[string]any)
	if res.Code() != "CONFLICT" || ext["quota"] != float64(1000) || ext["used"] != float64(600) || ext["size"] != float64(500) {
		t.Fatalf("over the quota: %s", res.Raw)
	}
	e.expectStored(t, 1, 1, 0, 1)
	attached(t, e.upload(t, e.member, e.otherTask, "a again", bytes.Repeat([]byte{'a'}, 600), ""))
	e.expectStored(t, 2, 1, 0, 1)
	if res := e.Post(t, e.member.Token, `mutation($id: ID!) { deleteAttachment(id: $id) }`, map[string]any{"id": first.ID}); res.Code() != "" {
		t.Fatal(res.Raw)
	}
	if res := e.upload(t, e.member, e.task, "b", bytes.Repeat([]byte{'b'}, 500), ""); res.Code() != "CONFLICT" {
		t.Fatalf("the other attachment still holds the bytes: %s", res.Raw)
	}
	var last struct {
		Task struct{ Attachments struct{ Nodes []attachment } }
	}
	res = e.Post(t, e.member.Token, `query($t: ID!) { task(id: $t) { attachments { nodes { id } } } }`, map[string]any{"t": e.otherTask})
	if err := json.Unmarshal(res.Body.Data, &last); err != nil || len(last.Task.Attachments.Nodes) != 1 {
		t.Fatal(res.Raw)
	}
	e.Post(t, e.member.Token, `mutation($id: ID!) { deleteAttachment(id: $id) }`, map[string]any{"id": last.Task.Attachments.Nodes[0].ID})
	attached(t, e.upload(t, e.member, e.task, "b", bytes.Repeat([]byte{'b'}, 500), ""))
}

// The uploader (while MEMBER or more) or an ADMIN or OWNER deletes an
// attachment; another MEMBER or a VIEWER is FORBIDDEN, a stranger NOT_FOUND.
func TestDeleteAttachmentRoles(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	del := func(as apitest.User, id string) string {
		t.Helper()
		return e.Post(t, as.Token, `mutation($id: ID!) { deleteAttachment(id: $id) }`, map[string]any{"id": id}).Code()
	}
	mine := attached(t, e.upload(t, e.member, e.task, "m", []byte("by the member"), ""))
	owners := attached(t, e.upload(t, e.owner, e.task, "o", []byte("by the owner"), ""))
	for name, c := range map[string]struct {
		as   apitest.User
		id   string
		code string
	}{
		"viewer":         {e.viewer, mine.ID, "FORBIDDEN"},
		"another member": {e.member, owners.ID, "FORBIDDEN"},
		"stranger":       {e.stranger, mine.ID, "NOT_FOUND"},
	} {
		if got := del(c.as, c.id); got != c.code {
			t.Errorf("%s: %q, want %s", name, got, c.code)
		}
	}
	if got := del(e.member, mine.ID); got != "" {
		t.Errorf("the uploader: %s", got)
	}
	if got := del(e.admin, owners.ID); got != "" {
		t.Errorf("an admin: %s", got)
	}
	e.expectStored(t, 0, 2, 0, 2) // the bytes wait for the sweeper's grace period
}

// The files' bytes are charged to the cost budget with the operation: one
// point per 64 KiB of the request's Content-Length, rounded up, reported in
// extensions.cost; a budget they do not fit in refuses the upload with 429
// before a byte of it is stored.
func TestAttachmentCost(t *testing.T) {
	t.Parallel()
	limiter, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Points: 100, MaxCost: 100},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := newFilesEnv(t, func(o *httpapi.Options) { o.Limiter = limiter })
	content := make([]byte, 1<<20) // 16 points, and a few bytes of form
	res := e.upload(t, e.member, e.task, "m", content, "")
	attached(t, res)
	body, _, n := apitest.Multipart(addAttachment, map[string]any{"t": e.task, "f": nil}, apitest.BytesFile("f", "m", content))
	_, _ = io.Copy(io.Discard, body)
	want := ratelimit.UploadCost(n)
	cost, _ := res.Body.Extensions["cost"].(map[string]any)
	price := cost["requestedQueryCost"].(float64)
	if want != 17 || price < float64(want)+10 || price > float64(want)+20 {
		t.Fatalf("requestedQueryCost %v; want the upload's %d points plus the mutation's", price, want)
	}
	// 100 points: five such uploads do not fit.
	var limited *apitest.Response
	added := 1
	for range 5 {
		r := e.upload(t, e.member, e.task, "m", content, "")
		if r.Status == http.StatusTooManyRequests {
			limited = r
			break
		}
		attached(t, r)
		added++
	}
	if limited == nil || limited.Code() != "RATE_LIMITED" {
		t.Fatal("five uploads of 1 MiB fitted a budget of 100 points")
	}
	e.expectStored(t, added, 1, 0, 1)
}

// attachment.added and attachment.deleted record the file's name, size and
// SHA-256 with the task and the uploader.
func TestAttachmentAuditEvents(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := []byte("spec v2")
	a := attached(t, e.upload(t, e.member, e.task, "spec.md", content, ""))
	e.Post(t, e.admin.Token, `mutation($id: ID!) { deleteAttachment(id: $id) }`, map[string]any{"id": a.ID})
	rows, err := e.DB.Pool.Query(context.Background(), `SELECT action, actor_id::text, metadata::text FROM audit_events
		WHERE entity_id = $1 ORDER BY occurred_at`, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var action, actor, raw string
		if err := rows.Scan(&action, &actor, &raw); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		if m["filename"] != "spec.md" || m["size"] != float64(len(content)) || m["sha256"] != hexSHA(content) ||
			m["taskId"] != e.task || m["uploaderId"] != e.member.ID {
			t.Errorf("%s metadata %s", action, raw)
		}
		got = append(got, action+" by "+actor)
	}
	if want := []string{"attachment.added by " + e.member.ID, "attachment.deleted by " + e.admin.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// A file name outside ASCII is kept (NFC, control characters cut) and comes
// back in Content-Disposition as RFC 2231's filename*.
func TestAttachmentUnicodeFilename(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	a := attached(t, e.upload(t, e.member, e.task, "re\u0301sume\u0301\t 2026.pdf", []byte("%PDF-1.7\n"), ""))
	if a.Filename != "résumé 2026.pdf" || a.ContentType != "application/pdf" {
		t.Fatalf("filename %q, type %q", a.Filename, a.ContentType)
	}
	res, _ := e.get(t, "", a.DownloadURL)
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename*=utf-8''r%C3%A9sum%C3%A9%202026.pdf` {
		t.Fatalf("Content-Disposition %q", got)
	}
}

// repeatReader yields line n times: a body of any length without holding it.
type repeatReader struct {
	line []byte
	n    int
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	c := copy(p, r.line[r.off:])
	if r.off += c; r.off == len(r.line) {
		r.off, r.n = 0, r.n-1
	}
	return c, nil
}

// What a multipart request may hold beside its files is bounded as the
// operations and map parts are, also when no Content-Length declares it (a
// chunked body): 30 MiB of preamble before the first part, or a part whose
// headers take 2 MiB, is 413 and stores nothing, where the same request
// without them is answered.
func TestAttachmentMultipartOverheadIsBounded(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	send := func(preamble io.Reader, fileHeader string) *apitest.Response {
		t.Helper()
		ops, _ := json.Marshal(map[string]any{"query": addAttachment, "variables": map[string]any{"t": e.task, "f": nil}})
		head := "--b\r\nContent-Disposition: form-data; name=\"operations\"\r\n\r\n" + string(ops) +
			"\r\n--b\r\nContent-Disposition: form-data; name=\"map\"\r\n\r\n{\"0\":[\"variables.f\"]}" +
			"\r\n--b\r\nContent-Disposition: form-data; name=\"0\"; filename=\"a.txt\"\r\n" + fileHeader + "\r\n"
		body := io.MultiReader(preamble, strings.NewReader(head), strings.NewReader("hello\r\n--b--\r\n"))
		req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/query", body)
		req.ContentLength = -1 // chunked: no length declared
		req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
		req.Header.Set("GraphQL-Preflight", "1")
		req.Header.Set("Authorization", "Bearer "+e.member.Token)
		return e.Do(t, req)
	}
	if res := send(strings.NewReader(""), ""); res.Status != http.StatusOK || res.Code() != "" {
		t.Fatalf("the request alone: %d %s", res.Status, res.Raw)
	}
	e.expectStored(t, 1, 1, 0, 1)
	for name, res := range map[string]*apitest.Response{
		"30 MiB of preamble": send(&repeatReader{line: []byte(strings.Repeat("x", 1022) + "\r\n"), n: 30 << 10}, ""),
		"2 MiB of headers":   send(strings.NewReader(""), strings.Repeat("X-Pad: "+strings.Repeat("y", 1000)+"\r\n", 2<<10)),
	} {
		if res.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d %.300s", name, res.Status, res.Raw)
		}
	}
	e.expectStored(t, 1, 1, 0, 1)
}

// A Range of many ranges is answered with the whole file (200, charged as
// such), not a multipart/byteranges of each: every range is a read of its own
// from the blob store (an S3 GET), and the 64 KiB of request headers hold
// 16,000 ranges ("0-0,0-0,..."), each overlapping ones the sum of whose sizes
// ServeContent's only check lets through. A few ranges are still served.
func TestAttachmentManyRangesServeTheWhole(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := []byte(strings.Repeat("0123456789", 1000))
	a := attached(t, e.upload(t, e.member, e.task, "digits.txt", content, ""))
	path := blobs.DownloadPath(a.ID)
	res, body := e.get(t, e.viewer.Token, path, "Range", "bytes=0-0,5-5")
	if res.StatusCode != http.StatusPartialContent || !strings.HasPrefix(res.Header.Get("Content-Type"), "multipart/byteranges") {
		t.Fatalf("two ranges: %d %s %.200q", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	for name, spec := range map[string]string{
		"1,000 ranges of a byte":        strings.Repeat("0-0,", 1000),
		"17 ranges":                     strings.TrimSuffix(strings.Repeat("1-2, ", 17), ", "),
		"1,000 ranges and empty commas": strings.Repeat("9-9,,", 1000),
	} {
		res, body := e.get(t, e.viewer.Token, path, "Range", "bytes="+spec)
		if res.StatusCode != http.StatusOK || !bytes.Equal(body, content) || res.Header.Get("Content-Range") != "" {
			t.Errorf("%s: %d %s, %d bytes", name, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
	}
}

// Options.MaxDownloadRanges (MAX_DOWNLOAD_RANGES) sets how many ranges are
// served as ranges: with 2, two are a 206 and three the whole file.
func TestAttachmentRangesBoundIsConfigurable(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t, func(o *httpapi.Options) { o.MaxDownloadRanges = 2 })
	content := []byte(strings.Repeat("0123456789", 100))
	path := blobs.DownloadPath(attached(t, e.upload(t, e.member, e.task, "digits.txt", content, "")).ID)
	res, body := e.get(t, e.viewer.Token, path, "Range", "bytes=0-0, 5-5")
	if res.StatusCode != http.StatusPartialContent || !strings.HasPrefix(res.Header.Get("Content-Type"), "multipart/byteranges") {
		t.Fatalf("two ranges: %d %s %.200q", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	res, body = e.get(t, e.viewer.Token, path, "Range", "bytes=0-0,5-5,7-7")
	if res.StatusCode != http.StatusOK || !bytes.Equal(body, content) {
		t.Fatalf("three ranges: %d %s, %d bytes", res.StatusCode, res.Header.Get("Content-Type"), len(body))
	}
}

// A Range the file cannot satisfy is 416 with Content-Range "bytes */size",
// and an If-Match it does not match 412, each with a JSON error as every other
// refused download, not ServeContent's text (or no body).
func TestAttachmentUnsatisfiableRangeIsJSON(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t)
	content := []byte(strings.Repeat("0123456789", 100))
	a := attached(t, e.upload(t, e.member, e.task, "digits.txt", content, ""))
	path := blobs.DownloadPath(a.ID)
	for name, c := range map[string]struct {
		header, value, contentRange string
		status                      int
	}{
		"past the end":   {"Range", "bytes=5000-", "bytes */1000", http.StatusRequestedRangeNotSatisfiable},
		"malformed":      {"Range", "bytes=9-1", "", http.StatusRequestedRangeNotSatisfiable},
		"other If-Match": {"If-Match", `"other"`, "", http.StatusPreconditionFailed},
	} {
		res, body := e.get(t, e.viewer.Token, path, c.header, c.value)
		var answer struct {
			Errors []struct {
				Message    string
				Extensions struct{ Code string }
			}
		}
		if res.StatusCode != c.status || res.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(body, &answer) != nil || len(answer.Errors) != 1 || answer.Errors[0].Extensions.Code != "BAD_USER_INPUT" ||
			res.Header.Get("Content-Range") != c.contentRange || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %s %q %q", name, res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Content-Range"), body)
		}
	}
}

// A user's multipart requests are read at most DefaultMaxUploadsPerUser at
// once per instance: one more is 429 with Retry-After, charged nothing, while
// another user is served; a slot is free again once its request is answered.
// Each may take 10 minutes to arrive, and one of a few bytes costs 12 points:
// before, a user kept hundreds stalled (each a connection, a blob-store writer
// and a registration).
func TestAttachmentUploadsAtOnceAreBounded(t *testing.T) {
	t.Parallel()
	uploadsAtOnceAreBounded(t, newFilesEnv(t), httpapi.DefaultMaxUploadsPerUser)
}

// Options.MaxUploadsPerUser (MAX_UPLOADS_PER_USER) sets the bound.
func TestAttachmentUploadsAtOnceBoundIsConfigurable(t *testing.T) {
	t.Parallel()
	uploadsAtOnceAreBounded(t, newFilesEnv(t, func(o *httpapi.Options) { o.MaxUploadsPerUser = 3 }), 3)
}

// stallUploads sends n uploads of the member's, each of which sends head
// and stalls (its body declares 100 bytes more), and returns the writers of
// their bodies and the channel each sends on once answered (or given up).
func (e *filesEnv) stallUploads(head string, n int) ([]*io.PipeWriter, chan struct{}) {
	stalled := make([]*io.PipeWriter, n)
	answered := make(chan struct{}, n)
	for i := range stalled {
		pr, pw := io.Pipe()
		stalled[i] = pw
		req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/query", pr)
		req.ContentLength = int64(len(head) + 100)
		req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
		req.Header.Set("GraphQL-Preflight", "1")
		req.Header.Set("Authorization", "Bearer "+e.member.Token)
		go func() {
			if res, err := e.Server.Client().Do(req); err == nil { // the client gives up: an error
				res.Body.Close()
			}
			answered <- struct{}{}
		}()
		go func() { _, _ = io.WriteString(pw, head) }()
	}
	return stalled, answered
}

// uploadsAtOnceAreBounded checks that e reads at most limit multipart
// requests of a user at once.
func uploadsAtOnceAreBounded(t *testing.T, e *filesEnv, limit int) {
	t.Helper()
	ops, _ := json.Marshal(map[string]any{"query": addAttachment, "variables": map[string]any{"t": e.task, "f": nil}})
	head := "--b\r\nContent-Disposition: form-data; name=\"operations\"\r\n\r\n" + string(ops) +
		"\r\n--b\r\nContent-Disposition: form-data; name=\"map\"\r\n\r\n{\"0\":[\"variables.f\"]}" +
		"\r\n--b\r\nContent-Disposition: form-data; name=\"0\"; filename=\"a.txt\"\r\n\r\nx"
	stalled, answered := e.stallUploads(head, limit)
	// Every stalled request has its file staged (registered) before the next one.
	eventually(t, 2*time.Minute, fmt.Sprintf("%d stalled uploads staged", len(stalled)), func() bool {
		_, _, uploads, _ := e.stored(t)
		return uploads == len(stalled)
	})
	res := e.upload(t, e.member, e.task, "a", []byte("one more"), "")
	if res.Status != http.StatusTooManyRequests || res.Code() != "RATE_LIMITED" || res.Header.Get("Retry-After") != "1" ||
		!strings.Contains(res.Body.Errors[0]["message"].(string), fmt.Sprintf("sending %d multipart requests", limit)) {
		t.Fatalf("one upload more than %d: %d %s", limit, res.Status, res.Raw)
	}
	attached(t, e.upload(t, e.owner, e.task, "b", []byte("another user"), ""))
	stalled[0].CloseWithError(io.ErrUnexpectedEOF) // the client gives up: its slot is free
	<-answered
	eventually(t, 2*time.Minute, "an upload after one stalled upload ended", func() bool {
		res := e.upload(t, e.member, e.task, "a", []byte("one more"), "")
		if res.Status != http.StatusOK && res.Status != http.StatusTooManyRequests {
			t.Fatalf("after one stalled upload ended: %d %s", res.Status, res.Raw)
		}
		return res.Status == http.StatusOK
	})
	for _, pw := range stalled[1:] {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range stalled[1:] {
		<-answered
	}
	// The server discards what the stalled requests staged once it reads
	// their end, after the client's.
	eventually(t, 2*time.Minute, "the stalled uploads' staged files discarded", func() bool {
		_, _, uploads, _ := e.stored(t)
		return uploads == 0
	})
	e.expectStored(t, 2, 2, 0, 2)
}

// A multipart request's extensions (but persistedQuery) and the variables
// its operation does not declare are not kept while its files stream in (up
// to 10 minutes): its operations part of up to 1 MiB, decoded, weighs up to
// twenty times as much (empty objects), and a user may send 16 at once to
// an instance. Eight uploads stalled in their file, each sent such
// extensions and variables, leave the heap as it was (within 3 MiB; the
// extensions were kept, 90 MiB, and padded within httpapi.MaxJSONItems
// would be about 5). Not parallel: it weighs the process's heap.
func TestStalledUploadsKeepNoUnreadParameters(t *testing.T) {
	e := newFilesEnv(t)
	const uploads = 8
	pad := padding((1<<20 - 1024) / 2)
	junk := `{"query":` + mustJSON(addAttachment) + `,"variables":{"t":"` + e.task + `","f":null,"junk":` + pad +
		`},"extensions":{"junk":` + pad + `}}`
	head := "--b\r\nContent-Disposition: form-data; name=\"operations\"\r\n\r\n" + junk +
		"\r\n--b\r\nContent-Disposition: form-data; name=\"map\"\r\n\r\n{\"0\":[\"variables.f\"]}" +
		"\r\n--b\r\nContent-Disposition: form-data; name=\"0\"; filename=\"a.txt\"\r\n\r\nx"
	var stalled []*io.PipeWriter
	var answered chan struct{}
	refused := 0
	httpapi.HeapHeld(t, 3<<20, fmt.Sprintf("%d uploads stalled in their file", uploads), func() any {
		stalled, answered = e.stallUploads(head, uploads)
		// Every stalled request has its file staged (its operation runs), or was
		// answered first: refused RATE_LIMITED when its caller's turns are paced
		// past 2 s (decoding 1 MiB each is slow under -race).
		staged := 0
		eventually(t, 2*time.Minute, fmt.Sprintf("%d uploads staged or answered", uploads), func() bool {
			select {
			case <-answered:
				refused++
			default:
			}
			_, _, staged, _ = e.stored(t)
			return staged+refused >= uploads
		})
		if staged < uploads/2 {
			t.Fatalf("%d of %d uploads staged (%d answered first): too few to weigh", staged, uploads, refused)
		}
		return stalled
	})
	for _, pw := range stalled {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range uploads - refused {
		<-answered
	}
}

// Content whose last attachment was deleted is new to the workspace's quota
// again, though its bytes stay for the grace period: re-attaching it is
// refused when it does not fit. It was taken as known (free), so deleting
// files, filling the room with others, then re-attaching the deleted ones
// within the grace period held any multiple of the quota.
func TestAttachmentQuotaCountsDeletedContentAgain(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t, func(o *httpapi.Options) {
		o.Blobs = apitest.OpenBlobs(t, o.DB, func(b *blobs.Options) { b.Quota = 1000 })
	})
	a := attached(t, e.upload(t, e.member, e.task, "a", bytes.Repeat([]byte{'a'}, 600), ""))
	if res := e.Post(t, e.member.Token, `mutation($id: ID!) { deleteAttachment(id: $id) }`, map[string]any{"id": a.ID}); res.Code() != "" {
		t.Fatal(res.Raw)
	}
	attached(t, e.upload(t, e.member, e.task, "b", bytes.Repeat([]byte{'b'}, 600), ""))
	res := e.upload(t, e.member, e.task, "a again", bytes.Repeat([]byte{'a'}, 600), "")
	if res.Code() != "CONFLICT" {
		t.Fatalf("deleted content over the quota: %s", res.Raw)
	}
	if ext, _ := res.Body.Errors[0]["extensions"].(map[string]any); ext["used"] != float64(600) || ext["size"] != float64(600) {
		t.Fatalf("deleted content over the quota: %s", res.Raw)
	}
	e.expectStored(t, 1, 2, 0, 2) // a's bytes wait for the sweeper
	var used int64
	if err := e.DB.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(b.size), 0) FROM attachment_blobs b
		WHERE EXISTS (SELECT 1 FROM attachments x WHERE x.workspace_id = b.workspace_id AND x.sha256 = b.sha256)`).Scan(&used); err != nil || used > 1000 {
		t.Fatalf("%d bytes attached with a quota of 1000 (%v)", used, err)
	}
}

// Bytes of deleted files wait for the sweeper (BLOB_SWEEP_GRACE) and stop
// counting towards the quota at once, so uploading a file and deleting it,
// again and again, stored without bound within the grace period: the
// workspace's stored bytes, attached and held, are capped at twice its quota
// (2026-12-05: five rounds of 600 bytes under a quota of 1,000 stored 3,000).
func TestDeletedFilesHeldBytesAreBounded(t *testing.T) {
	t.Parallel()
	e := newFilesEnv(t, func(o *httpapi.Options) {
		o.Blobs = apitest.OpenBlobs(t, o.DB, func(b *blobs.Options) { b.Quota = 1000 })
	})
	stored := func() (attached, held int64) {
		t.Helper()
		if err := e.DB.Pool.QueryRow(t.Context(), `SELECT
				coalesce(sum(b.size) FILTER (WHERE EXISTS (SELECT 1 FROM attachments x WHERE x.workspace_id = b.workspace_id AND x.sha256 = b.sha256)), 0),
				coalesce(sum(b.size) FILTER (WHERE NOT EXISTS (SELECT 1 FROM attachments x WHERE x.workspace_id = b.workspace_id AND x.sha256 = b.sha256)), 0)
			FROM attachment_blobs b`).Scan(&attached, &held); err != nil {
			t.Fatal(err)
		}
		return attached, held
	}
	refused := false
	for i := range 5 {
		res := e.upload(t, e.member, e.task, fmt.Sprintf("f%d", i), bytes.Repeat([]byte{byte('a' + i)}, 600), "")
		if res.Code() == "CONFLICT" {
			ext, _ := res.Body.Errors[0]["extensions"].(map[string]any)
			if ext["held"] != float64(1800) || ext["used"] != float64(0) || ext["size"] != float64(600) || ext["quota"] != float64(1000) {
				t.Fatalf("round %d: refused with %s, want held 1800, used 0, size 600, quota 1000", i, res.Raw)
			}
			refused = true
			break
		}
		a := attached(t, res)
		if res := e.Post(t, e.member.Token, `mutation($id: ID!) { deleteAttachment(id: $id) }`, map[string]any{"id": a.ID}); res.Code() != "" {
			t.Fatal(res.Raw)
		}
		if att, held := stored(); att+held > 2000 {
			t.Fatalf("round %d: %d bytes attached and %d held for the sweeper under a quota of 1000", i, att, held)
		}
	}
	if !refused {
		t.Fatal("five rounds of 600 bytes uploaded and deleted under a quota of 1000: none refused")
	}
	// A deleted file's own content is not held twice: attaching it again
	// moves its bytes from held to attached, and fits.
	attached(t, e.upload(t, e.member, e.task, "f0 again", bytes.Repeat([]byte{'a'}, 600), ""))
	if att, held := stored(); att != 600 || held != 1200 {
		t.Fatalf("after attaching deleted content again: %d attached, %d held; want 600, 1200", att, held)
	}
}
