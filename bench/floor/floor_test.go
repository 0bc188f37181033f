package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestLayersAnswerAlike checks that both layers give the answer the load
// checks, so that they do the same request's work: the gqlgen layer through
// TaskFlow's schema, the http layer as its fixed body.
func TestLayersAnswerAlike(t *testing.T) {
	t.Parallel()
	for _, layer := range []string{"http", "gqlgen"} {
		h, err := handlerOf(layer)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"query":` + strconv.Quote(query) + `,"variables":{"id":"` + taskID + `"}}`
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.String() != answer {
			t.Errorf("%s: %d %s, want 200 %s", layer, rec.Code, rec.Body, answer)
		}
	}
	if _, err := handlerOf("fasthttp"); err == nil {
		t.Error("an unknown layer was accepted")
	}
}

// TestMeasure runs the command as a user does, briefly, and reads its report.
func TestMeasure(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "floor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-d", "300ms", "-warmup", "100ms", "-c", "4")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("floor: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`(?m)^(http|gqlgen) +(\d+) req/s, server CPU +([\d.]+) µs a request, load generator CPU +([\d.]+) µs a request \((\d+) requests\)$`)
	found := line.FindAllStringSubmatch(string(out), -1)
	if len(found) != 2 || found[0][1] != "http" || found[1][1] != "gqlgen" {
		t.Fatalf("report:\n%s", out)
	}
	for _, m := range found {
		if n, _ := strconv.Atoi(m[5]); n == 0 {
			t.Errorf("%s: no request answered:\n%s", m[1], out)
		}
		if cpu, _ := strconv.ParseFloat(m[3], 64); cpu <= 0 {
			t.Errorf("%s: no server CPU measured:\n%s", m[1], out)
		}
	}
}
