package scaleout_test

import (
	"net"
	"sync"
	"syscall"
	"testing"

	"taskflow/store/storetest"
)

// raiseOpenFiles lifts the soft open-file limit of the test process (and of the
// servers it starts) to at least n, within the hard limit.
func raiseOpenFiles(t testing.TB, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Fatalf("open-file hard limit %d is below the %d this test needs", lim.Max, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
}

// 1,000 connections held open, half idle and half sending a request's headers
// only partly (slowloris), do not stop the server answering other clients.
func TestThousandConnectionsHeldOpen(t *testing.T) {
	t.Parallel()
	const held = 1000
	raiseOpenFiles(t, 4*held)
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	in := newInstance(t, "DATABASE_URL="+dbURL)
	in.start()
	_, token := newUser(t, pool, "ann")
	project := newProject(t, in, token)

	conns := make([]net.Conn, 0, held)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range held {
		c, err := net.Dial("tcp", in.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			if _, err := c.Write([]byte("POST /query HTTP/1.1\r\nHost: " + in.addr + "\r\nContent-Type: app")); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
	}

	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			r, err := in.post(token, createTask, taskVars(project, i))
			if err != nil || r.code() != "" {
				t.Errorf("request %d while %d connections are held: %v %v", i, held, err, r)
			}
			if code, body := in.healthz(t); code != 200 {
				t.Errorf("/healthz while %d connections are held: %d %v", held, code, body)
			}
		})
	}
	wg.Wait()
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != 30 {
		t.Errorf("%d tasks, want 30", n)
	}
	if in.exited() {
		t.Fatalf("the server exited:\n%s", in.stderr)
	}
}
