package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"taskflow/store/storetest"
)

// fetch GETs url and returns the status and body.
func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.StatusCode, b
}

// With PPROF_ADDR the binary serves net/http/pprof on that listener: a CPU
// profile can be taken from it, and nothing of pprof is served on HTTP_ADDR
// (nor GraphQL on the pprof listener).
func TestPprofOnItsOwnListener(t *testing.T) {
	t.Parallel()
	cmd := command(t, "DATABASE_URL="+storetest.URL(t), "HTTP_ADDR=127.0.0.1:0", "PPROF_ADDR=127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := watchLog(t, stderr)
	pprofAddr, _ := logs.waitFor(t, "pprof listening")["addr"].(string)
	addr, _ := logs.waitFor(t, "listening")["addr"].(string)
	if pprofAddr == "" || addr == "" || pprofAddr == addr {
		t.Fatalf("pprof on %q, HTTP on %q", pprofAddr, addr)
	}
	go func() { // keep reading stderr, so the server never blocks on its log
		for range logs.ch {
		}
	}()

	code, body := fetch(t, "http://"+pprofAddr+"/debug/pprof/profile?seconds=1")
	// A CPU profile is gzipped protobuf.
	if code != http.StatusOK || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("profile: %d, %d bytes %q", code, len(body), body[:min(len(body), 200)])
	}
	if code, body := fetch(t, "http://"+pprofAddr+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("pprof index: %d %q", code, body)
	}
	if code, body := fetch(t, "http://"+pprofAddr+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || len(body) == 0 {
		t.Errorf("goroutine profile: %d %q", code, body)
	}

	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline", "/debug/pprof/goroutine"} {
		if code, body := fetch(t, "http://"+addr+path); code != http.StatusNotFound {
			t.Errorf("HTTP_ADDR serves %s: %d %q", path, code, body)
		}
	}
	if code, _ := fetch(t, "http://"+pprofAddr+"/healthz"); code != http.StatusNotFound {
		t.Errorf("the pprof listener serves /healthz: %d", code)
	}
	if code, body := fetch(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz on HTTP_ADDR: %d %q", code, body)
	}
}

// A PPROF_ADDR that cannot be listened on stops the start with a message
// naming it.
func TestPprofAddrInUse(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := command(t, "DATABASE_URL="+storetest.URL(t), "HTTP_ADDR=127.0.0.1:0", "PPROF_ADDR="+taken.Addr().String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "PPROF_ADDR="+taken.Addr().String()) {
		t.Errorf("stderr does not name PPROF_ADDR:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), `"msg":"listening"`) {
		t.Errorf("said it listens:\n%s", stderr.String())
	}
}
