// Package apitest sets up TaskFlow for integration tests: a fresh migrated
// database, the complete HTTP handler, a gqlgen client on it and a real HTTP
// server, plus helpers to sign users up and call the API as them.
package apitest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"

	"taskflow/audit"
	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/httpapi"
	"taskflow/live"
	"taskflow/ratelimit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// Env is one test's TaskFlow.
type Env struct {
	DB *store.DB
	// AuditKey signs the audit checkpoints of Sealer; the handler trusts its
	// public key.
	AuditKey ed25519.PrivateKey
	// Blobs is the blob store of attachments, in a temporary directory.
	Blobs   *blobs.Store
	Handler http.Handler
	// Client is a gqlgen test client on Handler (no network).
	Client *client.Client
	// Server is a real HTTP server on loopback serving Handler.
	Server *httptest.Server
	// Live is the handler's hub of subscriptions, its tailer running until
	// the test ends.
	Live *live.Hub
}

// Option changes the Options of the handler before it is built.
type Option func(*httpapi.Options)

// New returns an Env on a fresh database.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	return newEnv(t, httpapi.NewHandler, opts)
}

// NewOn returns an Env on db, a store of a fresh migrated database (one
// whose pool traces its statements, say).
func NewOn(t testing.TB, db *store.DB, opts ...Option) *Env {
	t.Helper()
	return newEnvOn(t, db, httpapi.NewHandler, opts)
}

// NewUnguarded returns an Env whose handler leaves out the guards named
// (httpapi.NewUnguardedHandler), for benchmarks that measure what they cost.
func NewUnguarded(t testing.TB, without []httpapi.Guard, opts ...Option) *Env {
	t.Helper()
	return newEnv(t, func(o httpapi.Options) http.Handler { return httpapi.NewUnguardedHandler(o, without...) }, opts)
}

// newEnv builds the Env with the handler newHandler makes.
func newEnv(t testing.TB, newHandler func(httpapi.Options) http.Handler, opts []Option) *Env {
	t.Helper()
	return newEnvOn(t, storetest.DB(t), newHandler, opts)
}

// newEnvOn is newEnv on db.
func newEnvOn(t testing.TB, db *store.DB, newHandler func(httpapi.Options) http.Handler, opts []Option) *Env {
	t.Helper()
	key := audit.GenerateSigningKey()
	o := httpapi.Options{DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PasswordParams: auth.FastPasswordParams, Limiter: Unlimited(),
		AuditKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.Blobs == nil {
		o.Blobs = OpenBlobs(t, db, nil)
	}
	if o.Live == nil {
		o.Live = live.New(live.Options{DB: db, Log: o.Log})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.Live.Run(ctx) }()
	h := newHandler(o)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		o.Live.Close()
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return &Env{DB: db, AuditKey: key, Blobs: o.Blobs, Handler: h, Client: client.New(h, client.Path("/query")), Server: srv, Live: o.Live}
}

// Sealer returns an audit sealer of the Env's database that signs with
// AuditKey (tests run its rounds; no sealer runs on its own).
func (e *Env) Sealer() *store.AuditSealer { return &store.AuditSealer{DB: e.DB, Key: e.AuditKey} }

// Seal seals every committed audit event (storetest.SealAll) and signs no
// checkpoint (Sealer().Checkpoint signs one).
func (e *Env) Seal(t testing.TB) {
	t.Helper()
	storetest.Seal(t, e.DB)
}

// OpenBlobs opens a blob store of db in a temporary directory of the test,
// with the options set changes (nil: the defaults).
func OpenBlobs(t testing.TB, db *store.DB, set func(*blobs.Options)) *blobs.Store {
	t.Helper()
	o := blobs.Options{URL: "file://" + filepath.ToSlash(t.TempDir()) + "?no_tmp_dir=true&metadata=skip", DB: db,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if set != nil {
		set(&o)
	}
	bs, err := blobs.Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	return bs
}

// WithBlobs returns an Option that gives the Env a blob store of its own, in
// a temporary directory, with the options set changes.
func WithBlobs(t testing.TB, set func(*blobs.Options)) Option {
	return func(o *httpapi.Options) { o.Blobs = OpenBlobs(t, o.DB, set) }
}

// Unlimited returns an in-process rate limiter whose budgets no test reaches:
// the default of New, so tests of other features are not throttled. Tests of
// rate limiting pass their own limiter with an Option.
func Unlimited() *ratelimit.Limiter {
	huge := ratelimit.Limit{Points: 1 << 30, Window: time.Minute}
	l, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{
		Points: huge.Points, MaxCost: huge.Points, LoginPerIP: huge, LoginPerEmail: huge, RegisterPerIP: huge, Search: huge,
		BadTokenPerIP: huge, PersistedQueryKiBPerIP: huge,
	}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err) // only a REDIS_URL can fail, and there is none
	}
	return l
}

var seq atomic.Int64

// User is a signed-up test user.
type User struct {
	ID    string
	Email string
	Token string
}

// Auth returns a client option that sends the user's bearer token.
func (u User) Auth() client.Option {
	return client.AddHeader("Authorization", "Bearer "+u.Token)
}

// SignUp registers a new user with a unique e-mail and returns it signed in.
func (e *Env) SignUp(t testing.TB, name string) User {
	t.Helper()
	email := fmt.Sprintf("%s-%d@example.com", strings.ToLower(name), seq.Add(1))
	var resp struct {
		Register struct {
			Token string
			User  struct{ ID string }
		}
	}
	e.Client.MustPost(`mutation($in: RegisterInput!) { register(input: $in) { token user { id } } }`, &resp,
		client.Var("in", map[string]any{"email": email, "password": "correct horse", "name": name}))
	return User{ID: resp.Register.User.ID, Email: email, Token: resp.Register.Token}
}

// Response is a raw GraphQL-over-HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   struct {
		Data       json.RawMessage  `json:"data"`
		Errors     []map[string]any `json:"errors"`
		Extensions map[string]any   `json:"extensions"`
	}
	Raw []byte
}

// Code returns extensions.code of the first error, or "".
func (r *Response) Code() string {
	if len(r.Body.Errors) == 0 {
		return ""
	}
	ext, _ := r.Body.Errors[0]["extensions"].(map[string]any)
	code, _ := ext["code"].(string)
	return code
}

// Post sends one GraphQL operation over real HTTP with the given token ("" for
// anonymous) and extra headers, and decodes the answer.
func (e *Env) Post(t testing.TB, token, query string, vars map[string]any, headers ...string) *Response {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequest(http.MethodPost, e.Server.URL+"/query", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return e.send(t, req, token, headers)
}

// send sends req with the token ("" for anonymous) and the headers (name,
// value, name, value...), and decodes the answer.
func (e *Env) send(t testing.TB, req *http.Request, token string, headers []string) *Response {
	t.Helper()
	SetHeaders(req, token, headers...)
	return e.Do(t, req)
}

// SetHeaders sets req's Authorization to the bearer token (none for "") and
// the headers given as name, value pairs.
func SetHeaders(req *http.Request, token string, headers ...string) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
}

// Do sends req and decodes the answer as a GraphQL response.
func (e *Env) Do(t testing.TB, req *http.Request) *Response {
	t.Helper()
	res, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := &Response{Status: res.StatusCode, Header: res.Header}
	r.Raw, err = io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(r.Raw, &r.Body)
	return r
}

// NewUser inserts a user with a bearer token straight into the database, without
// going through register (for tests of other parts of the API).
func (e *Env) NewUser(t testing.TB, name string) User {
	t.Helper()
	email := fmt.Sprintf("%s-%d@example.com", strings.ToLower(name), seq.Add(1))
	ctx := t.Context()
	var id string
	err := e.DB.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, $2, 'x') RETURNING id`,
		email, name).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	tok := auth.NewToken()
	if _, err := e.DB.Pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 day')`,
		auth.HashToken(tok), id); err != nil {
		t.Fatal(err)
	}
	return User{ID: id, Email: email, Token: tok}
}
