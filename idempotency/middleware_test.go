package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/graph"
	"taskflow/graph/model"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/idempotency"
	"taskflow/resolvers"
	"taskflow/store"
	"taskflow/store/storetest"
)

// standIn is a resolver root whose createWorkspace is a small real mutation (SQL
// in the unit of work of ctx), so the middleware can be tested on its own; every
// other field is the real resolver.
type standIn struct {
	*resolvers.Resolver
	// calls counts the calls of the resolver; runs counts those that got past
	// its first statement, the ones that went on to do something. A repeat
	// whose key has a record may be called, but must not run: its first
	// statement fails (its claim went with it), and rolls back.
	calls, runs atomic.Int64
	// hold, when set, is waited for inside the transaction, after the insert.
	hold chan struct{}
	// entered, when set, is signalled once the insert is done.
	entered chan struct{}
}

func (s *standIn) Mutation() graph.MutationResolver {
	return &standInMutation{MutationResolver: s.Resolver.Mutation(), s: s}
}

type standInMutation struct {
	graph.MutationResolver
	s *standIn
}

// CreateWorkspace inserts a workspace with the caller as OWNER. The name "fail"
// fails after the insert; "wait-cancel" waits until the request is cancelled;
// "refuse-repeats" fails every call after the first before any statement.
func (m *standInMutation) CreateWorkspace(ctx context.Context, in model.CreateWorkspaceInput, _ *string) (*store.Workspace, error) {
	m.s.calls.Add(1)
	u := auth.UserFrom(ctx)
	if u == nil {
		return nil, errs.ErrUnauthenticated
	}
	tx := store.TxFrom(ctx)
	if tx == nil {
		return nil, errors.New("no unit of work")
	}
	if in.Name == "refuse-repeats" && m.s.calls.Load() > 1 {
		return nil, errs.Errorf(errs.CodeBadUserInput, "refused before any statement")
	}
	w := &store.Workspace{Name: in.Name, ViewerRole: store.RoleOwner}
	if err := tx.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ($1) RETURNING id, created_at`, in.Name).
		Scan(&w.ID, &w.CreatedAt); err != nil {
		return nil, err
	}
	m.s.runs.Add(1)
	if _, err := tx.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`, w.ID, u.ID); err != nil {
		return nil, err
	}
	if m.s.entered != nil {
		select {
		case m.s.entered <- struct{}{}:
		default:
		}
	}
	if m.s.hold != nil {
		<-m.s.hold
	}
	switch in.Name {
	case "fail":
		return nil, errs.Errorf(errs.CodeConflict, "refused after the insert")
	case "wait-cancel":
		if m.s.runs.Load() == 1 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}
	return w, nil
}

func newEnv(t *testing.T, opts ...apitest.Option) (*apitest.Env, *standIn) {
	s := &standIn{}
	env := apitest.New(t, append([]apitest.Option{func(o *httpapi.Options) {
		s.Resolver = &resolvers.Resolver{DB: o.DB}
		o.Resolvers = s
	}}, opts...)...)
	return env, s
}

const createWS = `mutation($name: String!, $key: String) {
	createWorkspace(input: {name: $name}, idempotencyKey: $key) { id name createdAt viewerRole } }`

func workspaces(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM workspaces`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func keys(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func ws(t *testing.T, r *apitest.Response, alias string) map[string]any {
	t.Helper()
	var data map[string]map[string]any
	if err := json.Unmarshal(r.Body.Data, &data); err != nil || data[alias] == nil {
		t.Fatalf("no %s in %s", alias, r.Raw)
	}
	return data[alias]
}

func TestReplayReturnsFirstAnswer(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	first := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k1"})
	if first.Code() != "" || first.Header.Get("Idempotent-Replayed") != "" || first.Body.Extensions["idempotency"] != nil {
		t.Fatalf("first: %s %v", first.Raw, first.Header)
	}
	// The thing changes after the first answer; the replay still gives the first answer.
	id := ws(t, first, "createWorkspace")["id"]
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE workspaces SET name = 'Renamed' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	// Inline literal, alias, other selection set: the same call.
	again := env.Post(t, u.Token, `mutation { again: createWorkspace(idempotencyKey: "k1", input: {name: "Acme"}) { name id } }`, nil)
	if again.Code() != "" {
		t.Fatalf("replay: %s", again.Raw)
	}
	got := ws(t, again, "again")
	if got["id"] != id || got["name"] != "Acme" {
		t.Fatalf("replay gave %v, first was %s", got, first.Raw)
	}
	if again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("no Idempotent-Replayed header: %v", again.Header)
	}
	ext, _ := json.Marshal(again.Body.Extensions["idempotency"])
	if string(ext) != `[{"key":"k1","path":["again"],"replayed":true}]` {
		t.Fatalf("extensions.idempotency = %s", ext)
	}
	full := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k1"})
	if ws(t, full, "createWorkspace")["createdAt"] != ws(t, first, "createWorkspace")["createdAt"] ||
		ws(t, full, "createWorkspace")["viewerRole"] != "OWNER" {
		t.Fatalf("replay %s differs from first %s", full.Raw, first.Raw)
	}
	if s.runs.Load() != 1 || s.calls.Load() != 1 || workspaces(t, env.DB) != 1 {
		t.Fatalf("resolver called %d times, ran %d, %d workspaces", s.calls.Load(), s.runs.Load(), workspaces(t, env.DB))
	}
	// Another user's identical key is unrelated.
	v := env.NewUser(t, "bob")
	other := env.Post(t, v.Token, createWS, map[string]any{"name": "Acme", "key": "k1"})
	if other.Header.Get("Idempotent-Replayed") != "" || ws(t, other, "createWorkspace")["id"] == id {
		t.Fatalf("other user's key replayed: %s", other.Raw)
	}
}

// A repeat replays even when the resolver would now fail before sending any
// statement (so before its claim went out); without a record, that failure is
// the answer and uses no key up.
func TestReplayWhenTheResolverFailsEarly(t *testing.T) {
	t.Parallel()
	envs, runs := instances(t, 2)
	u := envs[0].NewUser(t, "ann")
	first := envs[0].Post(t, u.Token, createWS, map[string]any{"name": "refuse-repeats", "key": "k"})
	// On another instance, so the resolver is called (and refuses) before the claim went out.
	runs[1].calls.Add(1)
	again := envs[1].Post(t, u.Token, createWS, map[string]any{"name": "refuse-repeats", "key": "k"})
	if first.Code() != "" || again.Header.Get("Idempotent-Replayed") != "true" ||
		ws(t, again, "createWorkspace")["id"] != ws(t, first, "createWorkspace")["id"] {
		t.Fatalf("first %s, repeat %s", first.Raw, again.Raw)
	}
	other := envs[1].Post(t, u.Token, createWS, map[string]any{"name": "refuse-repeats", "key": "k2"})
	if other.Code() != "BAD_USER_INPUT" || keys(t, envs[0].DB) != 1 {
		t.Fatalf("new key, resolver refusing: %s (%d keys)", other.Raw, keys(t, envs[0].DB))
	}
	if runs[1].calls.Load() != 3 || runs[1].runs.Load() != 0 || workspaces(t, envs[0].DB) != 1 {
		t.Fatalf("other instance: calls %d (one added by the test), runs %d, workspaces %d",
			runs[1].calls.Load(), runs[1].runs.Load(), workspaces(t, envs[0].DB))
	}
}

func TestMismatchChangesNothing(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	for _, q := range []string{
		`mutation { createWorkspace(input: {name: "Other"}, idempotencyKey: "k") { id } }`,
		`mutation { createProject(input: {workspaceId: "00000000-0000-0000-0000-000000000000", name: "Acme"}, idempotencyKey: "k") { id } }`,
	} {
		r := env.Post(t, u.Token, q, nil)
		if r.Code() != "IDEMPOTENCY_KEY_REUSED" {
			t.Fatalf("%s: %s", q, r.Raw)
		}
	}
	if s.runs.Load() != 1 || workspaces(t, env.DB) != 1 || keys(t, env.DB) != 1 {
		t.Fatalf("runs %d, workspaces %d, keys %d", s.runs.Load(), workspaces(t, env.DB), keys(t, env.DB))
	}
	// The first call still replays.
	if r := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"}); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("no replay after mismatch: %s", r.Raw)
	}
}

func TestBadKeysAndAnonymous(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	for _, k := range []string{"", string(make([]byte, 256)), "tab\tkey", "ключ"} {
		if r := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": k}); r.Code() != "BAD_USER_INPUT" {
			t.Errorf("key %q: %s", k, r.Raw)
		}
	}
	if r := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "A"}) { id } }`, nil, "Idempotency-Key", strings.Repeat("k", 256)); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("bad header: %s", r.Raw)
	}
	if r := env.Post(t, "", createWS, map[string]any{"name": "Acme", "key": "anon"}); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("anonymous: %s", r.Raw)
	}
	if s.calls.Load() != 0 || keys(t, env.DB) != 0 {
		t.Fatalf("calls %d keys %d", s.calls.Load(), keys(t, env.DB))
	}
	// The anonymous attempt did not use the key up.
	if r := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "anon"}); r.Code() != "" || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after anonymous: %s", r.Raw)
	}
}

func TestFailureStoresNothing(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	for i := range 2 {
		r := env.Post(t, u.Token, createWS, map[string]any{"name": "fail", "key": "k"})
		if r.Code() != "CONFLICT" {
			t.Fatalf("attempt %d: %s", i, r.Raw)
		}
	}
	if s.runs.Load() != 2 || workspaces(t, env.DB) != 0 || keys(t, env.DB) != 0 {
		t.Fatalf("runs %d, workspaces %d, keys %d", s.runs.Load(), workspaces(t, env.DB), keys(t, env.DB))
	}
}

func TestHeaderKey(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	q := `mutation { createWorkspace(input: {name: "Acme"}) { id } }`
	first := env.Post(t, u.Token, q, nil, "Idempotency-Key", "h1")
	again := env.Post(t, u.Token, q, nil, "Idempotency-Key", `"h1"`) // IETF sf-string form
	if again.Header.Get("Idempotent-Replayed") != "true" || ws(t, again, "createWorkspace")["id"] != ws(t, first, "createWorkspace")["id"] {
		t.Fatalf("header replay: %s / %s", first.Raw, again.Raw)
	}
	// Parameters of the sf-string are ignored (RFC 9651): the same key again.
	if r := env.Post(t, u.Token, q, nil, "Idempotency-Key", `"h1";v=2`); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("header with a parameter: %s", r.Raw)
	}
	// A malformed value is refused before anything runs.
	for _, bad := range []string{`"h1"x"`, "h 1", `"h1`} {
		if r := env.Post(t, u.Token, q, nil, "Idempotency-Key", bad); r.Code() != "BAD_USER_INPUT" ||
			string(r.Body.Data) != "" && string(r.Body.Data) != "null" {
			t.Fatalf("header %s: %s", bad, r.Raw)
		}
	}
	// The argument is the same key as the header.
	if r := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "h1"}); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("argument after header: %s", r.Raw)
	}
	// An argument wins over the header.
	arg := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "a1"}, "Idempotency-Key", "h1")
	if arg.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("header used despite argument: %s", arg.Raw)
	}
	// Several mutation fields: the header cannot say whose key it is; nothing runs.
	two := env.Post(t, u.Token, `mutation { a: createWorkspace(input: {name: "A"}) { id } b: createWorkspace(input: {name: "B"}) { id } }`,
		nil, "Idempotency-Key", "h2")
	if two.Code() != "BAD_USER_INPUT" || string(two.Body.Data) != "" && string(two.Body.Data) != "null" {
		t.Fatalf("two fields with a header: %s", two.Raw)
	}
	if s.runs.Load() != 2 {
		t.Fatalf("resolver ran %d times", s.runs.Load())
	}
}

// Several mutations in one document each use their own key; one key given
// to two of them is refused before either runs, identical calls or not (the
// first would commit while the answer said nothing changed).
func TestSeveralMutationsInOneDocument(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	r := env.Post(t, u.Token, `mutation {
		a: createWorkspace(input: {name: "A"}, idempotencyKey: "ka") { id }
		b: createWorkspace(input: {name: "B"}, idempotencyKey: "kb") { id }
	}`, nil)
	if r.Code() != "" || ws(t, r, "a")["id"] == ws(t, r, "b")["id"] {
		t.Fatal(string(r.Raw))
	}
	for _, q := range []string{
		`mutation { a: createWorkspace(input: {name: "C"}, idempotencyKey: "kc") { id }
			c: createWorkspace(input: {name: "C"}, idempotencyKey: "kc") { id name } }`,
		`mutation { a: createWorkspace(input: {name: "C"}, idempotencyKey: "kc") { id }
			c: createWorkspace(input: {name: "D"}, idempotencyKey: "kc") { id } }`,
	} {
		r := env.Post(t, u.Token, q, nil)
		if r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Body.Errors[0]["message"].(string), `"kc"`) ||
			!strings.Contains(r.Body.Errors[0]["message"].(string), "a, c") {
			t.Fatalf("one key for two fields: %s", r.Raw)
		}
	}
	if s.calls.Load() != 2 || workspaces(t, env.DB) != 2 || keys(t, env.DB) != 2 {
		t.Fatalf("calls %d, workspaces %d, keys %d", s.calls.Load(), workspaces(t, env.DB), keys(t, env.DB))
	}
}

func TestInProgressPastTheWait(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t, func(o *httpapi.Options) { o.IdempotencyWait = 50 * time.Millisecond })
	s.entered, s.hold = make(chan struct{}, 1), make(chan struct{})
	u := env.NewUser(t, "ann")
	done := make(chan *apitest.Response)
	go func() { done <- env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"}) }()
	<-s.entered // the first call holds the claimed key in its open transaction
	r := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	if r.Code() != "IDEMPOTENCY_IN_PROGRESS" {
		t.Fatalf("during first: %s", r.Raw)
	}
	ext := r.Body.Errors[0]["extensions"].(map[string]any)
	if ext["retryAfter"] != float64(1) {
		t.Fatalf("retryAfter: %s", r.Raw)
	}
	close(s.hold)
	first := <-done
	again := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	if again.Header.Get("Idempotent-Replayed") != "true" || ws(t, again, "createWorkspace")["id"] != ws(t, first, "createWorkspace")["id"] {
		t.Fatalf("after first: %s / %s", first.Raw, again.Raw)
	}
	if s.runs.Load() != 1 {
		t.Fatalf("runs %d", s.runs.Load())
	}
}

func TestDisconnectFreesKey(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	s.entered = make(chan struct{}, 1)
	u := env.NewUser(t, "ann")
	ctx, cancel := context.WithCancel(t.Context())
	body, _ := json.Marshal(map[string]any{"query": createWS, "variables": map[string]any{"name": "wait-cancel", "key": "k"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.Server.URL+"/query", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+u.Token)
	errc := make(chan error, 1)
	go func() {
		res, err := env.Server.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-s.entered // the first call holds the claimed key in its open transaction
	cancel()    // and its client goes away
	if err := <-errc; err == nil {
		t.Fatal("request finished despite cancel")
	}
	// The retry is not stuck: it waits for the abandoned claim to roll back, then runs.
	retry := env.Post(t, u.Token, createWS, map[string]any{"name": "wait-cancel", "key": "k"})
	if retry.Code() != "" || retry.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %s", retry.Raw)
	}
	if s.runs.Load() != 2 || workspaces(t, env.DB) != 1 || keys(t, env.DB) != 1 {
		t.Fatalf("runs %d, workspaces %d, keys %d", s.runs.Load(), workspaces(t, env.DB), keys(t, env.DB))
	}
}

// instances starts n servers (each with its own pool and middleware) on one
// database.
func instances(t *testing.T, n int) ([]*apitest.Env, []*standIn) {
	t.Helper()
	url := storetest.URL(t)
	var runs []*standIn
	var envs []*apitest.Env
	for range n {
		pool, err := pgxpool.New(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		db := store.New(pool, nil)
		s := &standIn{Resolver: &resolvers.Resolver{DB: db}}
		h := httpapi.NewHandler(httpapi.Options{DB: db, Resolvers: s, Log: silent()})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		runs = append(runs, s)
		envs = append(envs, &apitest.Env{DB: db, Handler: h, Server: srv})
	}
	return envs, runs
}

// A repeat on the instance that ran the key claims it before calling the
// resolver; on another instance the claim goes ahead of the resolver's first
// statement, which runs and rolls back, and from then on that instance too
// claims the key first.
func TestRepeatOnAnotherInstance(t *testing.T) {
	t.Parallel()
	envs, runs := instances(t, 2)
	u := envs[0].NewUser(t, "ann")
	first := envs[0].Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	here := envs[0].Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	if here.Header.Get("Idempotent-Replayed") != "true" || runs[0].calls.Load() != 1 {
		t.Fatalf("repeat on the same instance: %s, resolver called %d times", here.Raw, runs[0].calls.Load())
	}
	for i := range 2 {
		there := envs[1].Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
		if there.Header.Get("Idempotent-Replayed") != "true" ||
			ws(t, there, "createWorkspace")["id"] != ws(t, first, "createWorkspace")["id"] {
			t.Fatalf("repeat %d on another instance: %s (first %s)", i, there.Raw, first.Raw)
		}
	}
	if c, r := runs[1].calls.Load(), runs[1].runs.Load(); c != 1 || r != 0 {
		t.Fatalf("other instance: resolver called %d times and ran %d, want called once (ahead) and never run", c, r)
	}
	if workspaces(t, envs[0].DB) != 1 || keys(t, envs[0].DB) != 1 {
		t.Fatalf("%d workspaces, %d keys", workspaces(t, envs[0].DB), keys(t, envs[0].DB))
	}
}

func TestConcurrentSameKeyOnTwoInstances(t *testing.T) {
	t.Parallel()
	envs, runs := instances(t, 2)
	u := envs[0].NewUser(t, "ann")
	const n = 50
	answers := make([]*apitest.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = envs[i%2].Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "same"})
		})
	}
	wg.Wait()
	replays := 0
	for i, a := range answers {
		if a.Code() != "" {
			t.Fatalf("answer %d: %s", i, a.Raw)
		}
		if a.Header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
		if string(a.Body.Data) != string(answers[0].Body.Data) {
			t.Fatalf("answer %d %s differs from %s", i, a.Body.Data, answers[0].Body.Data)
		}
	}
	if got := runs[0].runs.Load() + runs[1].runs.Load(); got != 1 || replays != n-1 {
		t.Fatalf("resolver ran %d times, %d replays", got, replays)
	}
	if workspaces(t, envs[0].DB) != 1 {
		t.Fatalf("%d workspaces", workspaces(t, envs[0].DB))
	}
}

func TestExpiredKeyIsFree(t *testing.T) {
	t.Parallel()
	env, s := newEnv(t)
	u := env.NewUser(t, "ann")
	first := env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	// Time passes beyond the TTL.
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	// After expiry the key is free, even for other arguments.
	again := env.Post(t, u.Token, createWS, map[string]any{"name": "Other", "key": "k"})
	if again.Code() != "" || again.Header.Get("Idempotent-Replayed") != "" || ws(t, again, "createWorkspace")["id"] == ws(t, first, "createWorkspace")["id"] {
		t.Fatalf("after expiry: %s", again.Raw)
	}
	if s.runs.Load() != 2 || keys(t, env.DB) != 1 {
		t.Fatalf("runs %d keys %d", s.runs.Load(), keys(t, env.DB))
	}
	if r := env.Post(t, u.Token, createWS, map[string]any{"name": "Other", "key": "k"}); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("new claim does not replay: %s", r.Raw)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	env, _ := newEnv(t, func(o *httpapi.Options) { o.Registry = reg })
	u := env.NewUser(t, "ann")
	env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	env.Post(t, u.Token, createWS, map[string]any{"name": "Acme", "key": "k"})
	env.Post(t, u.Token, createWS, map[string]any{"name": "Other", "key": "k"})
	got := counters(t, reg)
	want := map[string]float64{"first_run": 1, "replay": 2, "mismatch": 1}
	for k, v := range want {
		if got["taskflow_idempotency_requests_total/createWorkspace/"+k] != v {
			t.Errorf("%s: %v", k, got)
		}
	}
}

// counters returns every counter of reg by name/label values.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out
}

func silent() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The middleware wraps only a mutation's field middleware (in
// MutateOperationContext): as a gqlgen field interceptor it would be called
// around every field of every query, with an allocation each.
func TestNotAroundEveryField(t *testing.T) {
	t.Parallel()
	var ext graphql.HandlerExtension = idempotency.New(idempotency.Options{})
	if _, ok := ext.(graphql.FieldInterceptor); ok {
		t.Fatal("the idempotency middleware is a field interceptor: gqlgen runs it around every field of every operation")
	}
}
