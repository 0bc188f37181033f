package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// auditResult is one line of e2e/node/graphql-http-audit.mjs.
type auditResult struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Level       string `json:"level"`
	Status      string `json:"status"`
	Reason      string `json:"reason"`
	HTTPStatus  int    `json:"httpStatus"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// The server passes every MUST and every SHOULD of the graphql-http audit of
// GraphQL over HTTP; the MAYs are reported (docs/graphql-over-http.md).
func TestGraphQLOverHTTPAudit(t *testing.T) {
	t.Parallel()
	nodeModules(t)
	env := apitest.New(t)
	out := runNode(t, 2*time.Minute, nil, "graphql-http-audit.mjs", env.Server.URL+"/query")

	var results []auditResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r auditResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit printed %q: %v", sc.Text(), err)
		}
		results = append(results, r)
	}
	if len(results) < 20 {
		t.Fatalf("the audit ran %d checks, want the full suite:\n%s", len(results), out)
	}

	counts := map[string]map[string]int{}
	var report strings.Builder
	for _, r := range results {
		if counts[r.Level] == nil {
			counts[r.Level] = map[string]int{}
		}
		counts[r.Level][r.Status]++
		fmt.Fprintf(&report, "%-6s %-5s %s %s", r.Status, r.ID, r.Name, r.Reason)
		if r.Status != "ok" {
			fmt.Fprintf(&report, " [HTTP %d, %s] %s", r.HTTPStatus, r.ContentType, strings.TrimSpace(r.Body))
		}
		report.WriteString("\n")
		if r.Status == "error" || ((r.Level == "MUST" || r.Level == "SHOULD") && r.Status != "ok") {
			t.Errorf("%s failed: %s (%s): %s [HTTP %d, %s] %s",
				r.Level, r.Name, r.ID, r.Reason, r.HTTPStatus, r.ContentType, strings.TrimSpace(r.Body))
		}
	}
	levels := make([]string, 0, len(counts))
	for l := range counts {
		levels = append(levels, l)
	}
	sort.Strings(levels)
	for _, l := range levels {
		fmt.Fprintf(&report, "%s: %d ok, %d failed\n", l, counts[l]["ok"], len(resultsAt(results, l))-counts[l]["ok"])
	}
	t.Logf("graphql-http audit:\n%s", report.String())
	writeArtifact(t, "graphql-http-audit.txt", report.String())
}

func resultsAt(results []auditResult, level string) []auditResult {
	var out []auditResult
	for _, r := range results {
		if r.Level == level {
			out = append(out, r)
		}
	}
	return out
}

// writeArtifact writes a text artifact to e2e/artifacts/ and, when set,
// $TEST_ARTIFACTS.
func writeArtifact(t *testing.T, name, text string) {
	t.Helper()
	for _, dir := range []string{"artifacts", os.Getenv("TEST_ARTIFACTS")} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("artifacts: %v", err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Errorf("artifact %s: %v", name, err)
		}
	}
}
