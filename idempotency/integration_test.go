package idempotency_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/auth"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store"
	"taskflow/store/storetest"
)

// These tests run the real resolvers and store behind the real handler.

func auditCount(t *testing.T, env *apitest.Env, action string) int {
	t.Helper()
	var n int
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_events WHERE action = $1`, action).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRealCreateWorkspaceReplay(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.SignUp(t, "ann")
	var first, again struct {
		CreateWorkspace struct {
			ID, Name, CreatedAt, ViewerRole string
			Members                         []struct{ Role string }
		}
	}
	q := `mutation($in: CreateWorkspaceInput!, $k: String) { createWorkspace(input: $in, idempotencyKey: $k) {
		id name createdAt viewerRole members { role } } }`
	env.Client.MustPost(q, &first, u.Auth(), client.Var("in", map[string]any{"name": "Acme"}), client.Var("k", "w1"))
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE workspaces SET name = 'Renamed' WHERE id = $1`, first.CreateWorkspace.ID); err != nil {
		t.Fatal(err)
	}
	env.Client.MustPost(q, &again, u.Auth(), client.Var("in", map[string]any{"name": "Acme"}), client.Var("k", "w1"))
	if again.CreateWorkspace.ID != first.CreateWorkspace.ID || again.CreateWorkspace.Name != "Acme" ||
		again.CreateWorkspace.CreatedAt != first.CreateWorkspace.CreatedAt || again.CreateWorkspace.ViewerRole != "OWNER" ||
		len(again.CreateWorkspace.Members) != 1 {
		t.Fatalf("replay %+v, first %+v", again, first)
	}
	// Over HTTP with the header form and a smaller selection set.
	r := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "Acme"}) { id } }`, nil, "Idempotency-Key", "w1")
	if r.Header.Get("Idempotent-Replayed") != "true" || ws(t, r, "createWorkspace")["id"] != first.CreateWorkspace.ID {
		t.Fatalf("header replay: %s", r.Raw)
	}
	if n := auditCount(t, env, "workspace.created"); n != 1 {
		t.Fatalf("%d workspace.created events after replays", n)
	}
	if r := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "Other"}, idempotencyKey: "w1") { id } }`, nil); r.Code() != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("mismatch: %s", r.Raw)
	}
	// A refused mutation (empty name) stores nothing: the key still runs afterwards.
	if r := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: ""}, idempotencyKey: "w2") { id } }`, nil); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("empty name: %s", r.Raw)
	}
	if r := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "Second"}, idempotencyKey: "w2") { id } }`, nil); r.Code() != "" || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after failure: %s", r.Raw)
	}
	if n := auditCount(t, env, "workspace.created"); n != 2 || workspaces(t, env.DB) != 2 {
		t.Fatalf("%d events, %d workspaces", n, workspaces(t, env.DB))
	}
	// The counters are served at /metrics.
	res, err := env.Server.Client().Get(env.Server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, line := range []string{
		`taskflow_idempotency_requests_total{field="createWorkspace",outcome="first_run"} 2`,
		`taskflow_idempotency_requests_total{field="createWorkspace",outcome="replay"} 2`,
		`taskflow_idempotency_requests_total{field="createWorkspace",outcome="mismatch"} 1`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// server is a taskflow process started from the built binary.
type server struct {
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
}

// lockedBuffer is the process's log, safe to read while the process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line)
	l.b.WriteByte('\n')
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// buildServer returns the taskflow binary (built once per test process).
func buildServer(t *testing.T) string {
	t.Helper()
	return apitest.Binary(t)
}

// startServer runs bin on the database and waits until it answers. It listens
// on port 0 and the address comes from its "listening" log line, so no other
// process can take the port between a check and the listen.
func startServer(t *testing.T, bin, dbURL string, env ...string) *server {
	t.Helper()
	s := &server{stderr: &lockedBuffer{}}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(append(apitest.CleanEnv(), "DATABASE_URL="+dbURL, "HTTP_ADDR=127.0.0.1:0"), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	addrs := make(chan string, 1)
	go func() { // reads until the process and its children are gone
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.stderr.add(line)
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
				select {
				case addrs <- rec.Addr:
				default:
				}
			}
		}
		close(addrs)
	}()
	select {
	case addr, ok := <-addrs:
		if !ok {
			t.Fatalf("server exited at start: %s", s.stderr)
		}
		s.url = "http://" + addr
	case <-time.After(60 * time.Second): // a readiness bound, not a timing assertion
		t.Fatalf("server did not start: %s", s.stderr)
	}
	return s
}

// post sends a GraphQL request to the server; err is a transport error.
func (s *server) post(token, query string, vars map[string]any) (*apitest.Response, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, s.url+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	r := &apitest.Response{Status: res.StatusCode, Header: res.Header}
	if r.Raw, err = io.ReadAll(res.Body); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(r.Raw, &r.Body); err != nil {
		return nil, fmt.Errorf("decode %q: %w", r.Raw, err)
	}
	return r, nil
}

func TestKilledServerRetriedExactlyOnce(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	dbURL := storetest.URL(t)
	srv := startServer(t, bin, dbURL)
	reg, err := srv.post("", `mutation($in: RegisterInput!) { register(input: $in) { token } }`,
		map[string]any{"in": map[string]any{"email": "kill@example.com", "password": "correct horse", "name": "K"}})
	if err != nil || reg.Code() != "" {
		t.Fatalf("register: %v %v", err, reg)
	}
	var tok struct{ Register struct{ Token string } }
	_ = json.Unmarshal(reg.Body.Data, &tok)
	token := tok.Register.Token

	const n = 40
	q := `mutation($name: String!, $key: String) { createWorkspace(input: {name: $name}, idempotencyKey: $key) { id name } }`
	vars := func(i int) map[string]any {
		return map[string]any{"name": fmt.Sprintf("ws-%d", i), "key": fmt.Sprintf("key-%d", i)}
	}
	firstIDs := make([]any, n)
	var mu sync.Mutex
	answered := 0
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				r, err := srv.post(token, q, vars(i))
				if err != nil || r.Code() != "" {
					continue // cut off by the kill
				}
				mu.Lock()
				firstIDs[i] = ws(t, r, "createWorkspace")["id"]
				answered++
				if answered == 10 {
					once.Do(func() {
						_ = srv.cmd.Process.Signal(syscall.SIGKILL)
						close(killed)
					})
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-killed:
		}
	}
	close(next)
	wg.Wait()
	<-killed
	_ = srv.cmd.Wait()

	srv = startServer(t, bin, dbURL)
	replays := 0
	for i := range n {
		r, err := srv.post(token, q, vars(i))
		if err != nil || r.Code() != "" {
			t.Fatalf("retry %d: %v %v", i, err, r)
		}
		id := ws(t, r, "createWorkspace")["id"]
		if firstIDs[i] != nil {
			if r.Header.Get("Idempotent-Replayed") != "true" || id != firstIDs[i] {
				t.Fatalf("key %d answered before the kill as %v, after restart %s", i, firstIDs[i], r.Raw)
			}
		}
		if r.Header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
	}
	if replays < 10 {
		t.Fatalf("%d replays after restart, want at least 10", replays)
	}
	db := openDB(t, dbURL)
	var total, distinct, events int
	if err := db.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT name) FROM workspaces`).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM audit_events WHERE action = 'workspace.created'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if total != n || distinct != n || events != n {
		t.Fatalf("%d workspaces (%d names), %d events; want %d each", total, distinct, events, n)
	}
}

func openDB(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestRealCreateTaskReplay(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.SignUp(t, "ann")
	w := env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)
	p := env.Post(t, u.Token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "P"}) { id } }`,
		map[string]any{"w": ws(t, w, "createWorkspace")["id"]})
	projectID := ws(t, p, "createProject")["id"]
	create := `mutation($in: CreateTaskInput!) { createTask(input: $in, idempotencyKey: "t1") {
		id title description status priority project { id } } }`
	in := map[string]any{"projectId": projectID, "title": "T", "description": "d"}
	first := env.Post(t, u.Token, create, map[string]any{"in": in})
	task := ws(t, first, "createTask")
	if first.Code() != "" || task["status"] != "TODO" {
		t.Fatalf("first: %s", first.Raw)
	}
	upd := env.Post(t, u.Token, `mutation($id: ID!) { updateTask(id: $id, input: {title: "Changed", status: DONE}) { id } }`,
		map[string]any{"id": task["id"]})
	if upd.Code() != "" {
		t.Fatalf("update: %s", upd.Raw)
	}
	// Same call written with inline literals and the default spelled out.
	again := env.Post(t, u.Token, `mutation { createTask(idempotencyKey: "t1", input: {description: "d", title: "T", status: TODO, projectId: "`+
		projectID.(string)+`"}) { title status id description } }`, nil)
	got := ws(t, again, "createTask")
	if again.Header.Get("Idempotent-Replayed") != "true" || got["id"] != task["id"] || got["title"] != "T" || got["status"] != "TODO" || got["description"] != "d" {
		t.Fatalf("replay after edit: %s", again.Raw)
	}
	if n := auditCount(t, env, "task.created"); n != 1 {
		t.Fatalf("%d task.created events", n)
	}
	// For updateTask, leaving description out and sending it as null are different calls.
	up := `mutation($id: ID!, $in: UpdateTaskInput!) { updateTask(id: $id, input: $in, idempotencyKey: "u1") { id title } }`
	if r := env.Post(t, u.Token, up, map[string]any{"id": task["id"], "in": map[string]any{"title": "X"}}); r.Code() != "" {
		t.Fatalf("update u1: %s", r.Raw)
	}
	if r := env.Post(t, u.Token, up, map[string]any{"id": task["id"], "in": map[string]any{"title": "X", "description": nil}}); r.Code() != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("null vs absent: %s", r.Raw)
	}
	if n := auditCount(t, env, "task.updated"); n != 2 {
		t.Fatalf("%d task.updated events", n)
	}
}

func TestRealConcurrentCreateTaskOnTwoInstances(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	var envs []*apitest.Env
	for range 2 {
		pool := openDB(t, url)
		db := store.New(pool, nil)
		h := httpapi.NewHandler(httpapi.Options{DB: db, Log: silent(), PasswordParams: auth.FastPasswordParams})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		envs = append(envs, &apitest.Env{DB: db, Handler: h, Server: srv})
	}
	u := envs[0].NewUser(t, "ann")
	w := envs[0].Post(t, u.Token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil)
	p := envs[1].Post(t, u.Token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "P"}) { id } }`,
		map[string]any{"w": ws(t, w, "createWorkspace")["id"]})
	vars := map[string]any{"in": map[string]any{"projectId": ws(t, p, "createProject")["id"], "title": "once"}}
	q := `mutation($in: CreateTaskInput!) { createTask(input: $in, idempotencyKey: "same") { id title createdAt } }`
	const n = 50
	answers := make([]*apitest.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = envs[i%2].Post(t, u.Token, q, vars) })
	}
	wg.Wait()
	replays := 0
	for i, a := range answers {
		if a.Code() != "" || string(a.Body.Data) != string(answers[0].Body.Data) {
			t.Fatalf("answer %d: %s, answer 0: %s", i, a.Raw, answers[0].Raw)
		}
		if a.Header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
	}
	var tasks int
	if err := envs[0].DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM tasks`).Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	if tasks != 1 || replays != n-1 || auditCount(t, envs[0], "task.created") != 1 {
		t.Fatalf("%d tasks, %d replays, %d task.created events", tasks, replays, auditCount(t, envs[0], "task.created"))
	}
}

func TestServerReadsIdempotencyTTL(t *testing.T) {
	t.Parallel()
	srv := startServer(t, buildServer(t), storetest.URL(t), "IDEMPOTENCY_TTL=1ms", "IDEMPOTENCY_WAIT=0")
	reg, err := srv.post("", `mutation($in: RegisterInput!) { register(input: $in) { token } }`,
		map[string]any{"in": map[string]any{"email": "ttl@example.com", "password": "correct horse", "name": "T"}})
	if err != nil || reg.Code() != "" {
		t.Fatalf("register: %v %v", err, reg)
	}
	var tok struct{ Register struct{ Token string } }
	_ = json.Unmarshal(reg.Body.Data, &tok)
	q := `mutation { createWorkspace(input: {name: "W"}, idempotencyKey: "short") { id } }`
	first, err := srv.post(tok.Register.Token, q, nil)
	if err != nil || first.Code() != "" {
		t.Fatalf("first: %v %v", err, first)
	}
	// A key kept for 1ms has expired by the next request: the call runs again.
	again, err := srv.post(tok.Register.Token, q, nil)
	if err != nil || again.Code() != "" || again.Header.Get("Idempotent-Replayed") != "" ||
		ws(t, again, "createWorkspace")["id"] == ws(t, first, "createWorkspace")["id"] {
		t.Fatalf("after the TTL: %v %s / %s", err, first.Raw, again.Raw)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	apitest.RemoveBinary()
	os.Exit(code)
}

// A keyed update's record is made by Postgres from the row it committed
// (store.SaveIdempotencyValue): its replay, after the row changed again, gives
// the first answer byte for byte, every field of the entity selected, for
// tasks, comments and projects.
func TestRealUpdateReplays(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.SignUp(t, "ann")
	w := ws(t, env.Post(t, u.Token, `mutation { createWorkspace(input: {name: "W"}) { id } }`, nil), "createWorkspace")["id"]
	project := ws(t, env.Post(t, u.Token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "P"}) { id } }`,
		map[string]any{"w": w}), "createProject")["id"]
	task := ws(t, env.Post(t, u.Token, `mutation($p: ID!) { createTask(input: {projectId: $p, title: "T"}) { id } }`,
		map[string]any{"p": project}), "createTask")["id"]
	comment := ws(t, env.Post(t, u.Token, `mutation($t: ID!) { addComment(taskId: $t, body: "c") { id } }`,
		map[string]any{"t": task}), "addComment")["id"]
	for _, c := range []struct {
		field, keyed, other string
		id                  any
	}{
		{"updateTask", `mutation($id: ID!) { updateTask(id: $id, idempotencyKey: "k1", input: {title: "T2", description: "d \" ü",
			status: IN_PROGRESS, priority: URGENT, dueDate: "2031-05-06T07:08:09.120Z"}) {
			id title description status priority dueDate createdAt updatedAt assignee { id } createdBy { id } project { id } } }`,
			`mutation($id: ID!) { updateTask(id: $id, input: {title: "T3", description: null, dueDate: null}) { id } }`, task},
		{"updateComment", `mutation($id: ID!) { updateComment(id: $id, body: "c2", idempotencyKey: "k2") {
			id body createdAt updatedAt author { id } task { id } } }`,
			`mutation($id: ID!) { updateComment(id: $id, body: "c3") { id } }`, comment},
		{"updateProject", `mutation($id: ID!) { updateProject(id: $id, idempotencyKey: "k3", input: {name: "P2", description: "x"}) {
			id name description archived archivedAt createdAt updatedAt } }`,
			`mutation($id: ID!) { updateProject(id: $id, input: {name: "P3"}) { id } }`, project},
		{"archiveProject", `mutation($id: ID!) { archiveProject(id: $id, idempotencyKey: "k4") {
			id name description archived archivedAt createdAt updatedAt } }`,
			`mutation($id: ID!) { updateProject(id: $id, input: {name: "P4"}) { id } }`, project},
	} {
		vars := map[string]any{"id": c.id}
		first := env.Post(t, u.Token, c.keyed, vars)
		if first.Code() != "" || first.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%s: %s", c.field, first.Raw)
		}
		if r := env.Post(t, u.Token, c.other, vars); r.Code() != "" {
			t.Fatalf("%s, changed again: %s", c.field, r.Raw)
		}
		again := env.Post(t, u.Token, c.keyed, vars)
		if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body.Data) != string(first.Body.Data) {
			t.Fatalf("%s: replay\n %s\nfirst\n %s", c.field, again.Body.Data, first.Body.Data)
		}
	}
}
