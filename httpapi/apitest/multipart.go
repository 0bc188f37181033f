package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
)

// File is a file of a multipart request: it goes where the variables hold
// null at Path ("file" is variables.file), with the name Name, and holds Size
// bytes read from Body.
type File struct {
	Path string
	Name string
	Size int64
	Body io.Reader
}

// BytesFile is a File of content.
func BytesFile(path, name string, content []byte) File {
	return File{Path: path, Name: name, Size: int64(len(content)), Body: bytes.NewReader(content)}
}

// Multipart returns the body of a GraphQL multipart request (the
// specification's operations, map and file parts, the files streamed from
// their Body), its Content-Type and its length.
func Multipart(query string, vars map[string]any, files ...File) (io.Reader, string, int64) {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	ops, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	_ = mw.WriteField("operations", string(ops))
	m := map[string][]string{}
	for i, f := range files {
		m[fmt.Sprint(i)] = []string{"variables." + f.Path}
	}
	mb, _ := json.Marshal(m)
	_ = mw.WriteField("map", string(mb))
	readers := []io.Reader{}
	length := int64(0)
	for i, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="%d"; filename="%s"`, i,
			strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(f.Name)))
		h.Set("Content-Type", "application/octet-stream")
		_, _ = mw.CreatePart(h)
		part := bytes.Clone(head.Bytes())
		head.Reset()
		readers = append(readers, bytes.NewReader(part), io.LimitReader(f.Body, f.Size))
		length += int64(len(part)) + f.Size
	}
	_ = mw.Close()
	readers = append(readers, bytes.NewReader(bytes.Clone(head.Bytes())))
	length += int64(head.Len())
	return io.MultiReader(readers...), mw.FormDataContentType(), length
}

// Upload sends one GraphQL operation with files as a multipart request, with
// the header GraphQL-Preflight and the given token ("" for anonymous) and extra
// headers, and decodes the answer.
func (e *Env) Upload(t testing.TB, token, query string, vars map[string]any, files []File, headers ...string) *Response {
	t.Helper()
	body, ctype, n := Multipart(query, vars, files...)
	req, err := http.NewRequest(http.MethodPost, e.Server.URL+"/query", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("GraphQL-Preflight", "1")
	return e.send(t, req, token, headers)
}
