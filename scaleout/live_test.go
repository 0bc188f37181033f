package scaleout_test

import (
	"encoding/json"
	"sync"
	"syscall"
	"testing"
	"time"

	coderws "github.com/coder/websocket"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit/ratelimittest"
	"taskflow/store"
	"taskflow/store/storetest"
)

const liveTasks = `subscription($p: ID!, $after: String) { taskChanges(projectId: $p, after: $after) { cursor action taskId } }`

// liveItem is one taskChanges item, or the error that ended the stream.
type liveItem struct {
	Cursor, Action, TaskID string
	Code                   string
}

// liveNext reads the next item of subscription "1" on ws; err is the
// connection's end (a kill, a close).
func liveNext(t *testing.T, ws *apitest.WS) (liveItem, error) {
	t.Helper()
	m, err := ws.TryNext()
	if err != nil {
		return liveItem{}, err
	}
	switch m.Type {
	case "next":
		var p struct {
			Data struct{ TaskChanges liveItem }
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			t.Fatalf("next %s: %v", m.Payload, err)
		}
		return p.Data.TaskChanges, nil
	case "error":
		var errs []struct{ Extensions map[string]any }
		_ = json.Unmarshal(m.Payload, &errs)
		code := ""
		if len(errs) > 0 {
			code, _ = errs[0].Extensions["code"].(string)
		}
		return liveItem{Code: code}, nil
	}
	t.Fatalf("unexpected message %+v", m)
	return liveItem{}, nil
}

// liveDial connects to in and subscribes to the project's task changes
// after the cursor.
func liveDial(t *testing.T, in *instance, token, project, after string) *apitest.WS {
	t.Helper()
	ws := apitest.DialWS(t, in.url+"/query", apitest.WSOptions{Init: map[string]any{"Authorization": "Bearer " + token}})
	vars := map[string]any{"p": project}
	if after != "" {
		vars["after"] = after
	}
	ws.Subscribe("1", liveTasks, vars)
	return ws
}

// A subscriber on instance A gets the changes made through B and C (Redis
// wake-ups); A is SIGKILLed in the middle of a write load, and the client
// reconnects to B with the last cursor it saw: in the end it has every
// committed task exactly once, in spine order. A member removed through C
// stops receiving on B with NOT_FOUND.
func TestLiveAcrossInstancesThroughSIGKILL(t *testing.T) {
	t.Parallel()
	rds := ratelimittest.StartRedis(t)
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	ins := startInstances(t, 3, "DATABASE_URL="+dbURL, "REDIS_URL=redis://"+rds.Addr()+"/0", "RATE_LIMIT_POINTS=1000000")
	a, b, c := ins[0], ins[1], ins[2]
	_, token := newUser(t, pool, "ann")
	project := newProject(t, b, token)

	ws := liveDial(t, a, token, project, "")
	a.awaitSubscriptions(t, 1)
	// A's subscription is open once a change made after it arrives.
	probe := b.mustPost(t, token, createTask, taskVars(project, -1)).field("createTask")["id"]
	first, err := liveNext(t, ws)
	for err == nil && first.TaskID != probe {
		first, err = liveNext(t, ws)
	}
	if err != nil {
		t.Fatalf("the probe task never arrived on A: %v", err)
	}

	const tasks = 120
	var wg sync.WaitGroup
	next := make(chan int)
	for w := range 4 {
		wg.Go(func() {
			for i := range next {
				in := []*instance{b, c}[(i+w)%2]
				for try := 0; ; try++ {
					r, err := in.post(token, createTask, taskVars(project, i))
					if err == nil && r.code() == "" {
						break
					}
					if try == 50 {
						t.Errorf("task %d: %v %v", i, err, r)
						break
					}
				}
			}
		})
	}
	go func() {
		for i := range tasks {
			next <- i
		}
		close(next)
	}()

	var got []liveItem
	last := first
	killed := false
	for len(got) < tasks {
		it, err := liveNext(t, ws)
		if err != nil {
			if !killed {
				t.Fatalf("the stream on A ended before the kill: %v", err)
			}
			ws = liveDial(t, b, token, project, last.Cursor)
			continue
		}
		if it.Code != "" {
			t.Fatalf("the stream ended with %s", it.Code)
		}
		got = append(got, it)
		last = it
		if len(got) == tasks/4 && !killed {
			killed = true
			a.signalKill()
		}
	}
	wg.Wait()
	assertSpineOrder(t, got)
	ids := map[string]bool{}
	for _, it := range got {
		if ids[it.TaskID] {
			t.Fatalf("task %s delivered twice", it.TaskID)
		}
		ids[it.TaskID] = true
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks WHERE project_id = $1`, project); n != tasks+1 || len(ids) != tasks {
		t.Fatalf("%d tasks delivered, %d in the project (with the probe)", len(ids), n)
	}

	// Revocation across instances: a member subscribed on B, removed through C.
	memberID, memberToken := newUser(t, pool, "bob")
	var ws1 string
	if err := pool.QueryRow(t.Context(), `SELECT workspace_id FROM projects WHERE id = $1`, project).Scan(&ws1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, ws1, memberID); err != nil {
		t.Fatal(err)
	}
	mws := liveDial(t, b, memberToken, project, last.Cursor)
	probe = c.mustPost(t, token, createTask, taskVars(project, tasks)).field("createTask")["id"]
	for it, err := liveNext(t, mws); it.TaskID != probe; it, err = liveNext(t, mws) {
		if err != nil || it.Code != "" {
			t.Fatalf("member's stream before the removal: %v %s", err, it.Code)
		}
	}
	c.mustPost(t, token, `mutation($w: ID!, $u: ID!) { removeMember(workspaceId: $w, userId: $u) }`,
		map[string]any{"w": ws1, "u": memberID})
	if it, err := liveNext(t, mws); err != nil || it.Code != "NOT_FOUND" {
		t.Fatalf("removed member's stream: %+v %v", it, err)
	}

	// Logout across instances: subscribed on B (which just read the token:
	// its token cache says valid), logged out through C.
	carlID, carlToken := newUser(t, pool, "carl")
	if _, err := pool.Exec(t.Context(), `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, ws1, carlID); err != nil {
		t.Fatal(err)
	}
	cws := liveDial(t, b, carlToken, project, last.Cursor)
	probe = c.mustPost(t, token, createTask, taskVars(project, tasks+1)).field("createTask")["id"]
	for it, err := liveNext(t, cws); it.TaskID != probe; it, err = liveNext(t, cws) {
		if err != nil || it.Code != "" {
			t.Fatalf("carl's stream before the logout: %v %s", err, it.Code)
		}
	}
	b.mustPost(t, carlToken, `{ me { id } }`, nil) // B's token cache holds the token now
	c.mustPost(t, carlToken, `mutation { logout }`, nil)
	if it, err := liveNext(t, cws); err != nil || it.Code != "UNAUTHENTICATED" {
		t.Fatalf("logged-out stream on another instance: %+v %v", it, err)
	}
}

// assertSpineOrder checks that the items' cursors only go forward.
func assertSpineOrder(t *testing.T, items []liveItem) {
	t.Helper()
	var prev store.SpineCursor
	for i, it := range items {
		c, err := store.ParseSpineCursor(it.Cursor)
		if err != nil {
			t.Fatalf("item %d: cursor %q: %v", i, it.Cursor, err)
		}
		if i > 0 && !prev.Before(c) {
			t.Fatalf("item %d is not after item %d in spine order", i, i-1)
		}
		prev = c
	}
}

// SIGTERM closes open WebSocket connections with 1012 (service restart) and
// the instance exits without waiting SHUTDOWN_TIMEOUT for them.
func TestLiveSIGTERMClosesWith1012(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	in := newInstance(t, "DATABASE_URL="+dbURL, "SHUTDOWN_TIMEOUT=10m")
	in.start()
	_, token := newUser(t, pool, "ann")
	project := newProject(t, in, token)
	ws := liveDial(t, in, token, project, "")
	in.awaitSubscriptions(t, 1)
	probe := in.mustPost(t, token, createTask, taskVars(project, 0)).field("createTask")["id"]
	if it, err := liveNext(t, ws); err != nil || it.TaskID != probe {
		t.Fatalf("before SIGTERM: %+v %v", it, err)
	}
	in.mu.Lock()
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	in.mu.Unlock()
	for {
		it, err := liveNext(t, ws)
		if err != nil {
			if code := coderws.CloseStatus(err); code != httpapi.CloseServiceRestart {
				t.Fatalf("closed with %d (%v), want 1012", code, err)
			}
			break
		}
		if it.Code != "STREAM_INTERRUPTED" {
			t.Fatalf("before the close: %+v", it)
		}
	}
	select {
	case <-in.done:
	case <-time.After(60 * time.Second): // a guard: SHUTDOWN_TIMEOUT is 10 minutes
		t.Fatalf("the instance did not exit after SIGTERM:\n%s", in.stderr)
	}
	if code := in.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, in.stderr)
	}
}
