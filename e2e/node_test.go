package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// nodeDir is the folder of the tests' Node.js scripts and packages.
const nodeDir = "node"

// require skips the test when a prerequisite is missing on a developer
// machine, and fails it when CI is set (CI must have installed it).
func require(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing and CI is set: .ci/run must install it", what)
	}
	t.Skipf("%s is missing (CI unset, so skipping): see e2e/doc.go", what)
}

var (
	npmOnce sync.Once
	npmErr  error
	npmOut  []byte
)

// nodeModules makes sure e2e/node's packages are installed (npm ci, once per
// test binary, when its node_modules lacks one of them).
func nodeModules(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("node")
	require(t, err == nil, "node")
	npmOnce.Do(func() {
		installed := true
		for _, pkg := range []string{"playwright-core", "graphql-http", "graphql", "@apollo/client", "apollo-upload-client",
			"graphql-ws", "graphql-sse", "ws"} {
			if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", pkg, "package.json")); err != nil {
				installed = false
			}
		}
		if installed {
			return
		}
		if _, err := exec.LookPath("npm"); err != nil {
			npmErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = nodeDir
		npmOut, npmErr = cmd.CombinedOutput()
	})
	if npmErr != nil {
		require(t, false, "e2e/node's npm packages (npm ci in e2e/node failed: "+npmErr.Error()+")\n"+string(npmOut))
	}
}

// runNode runs a script of e2e/node with args and returns its stdout; stderr
// goes to the test log.
func runNode(t *testing.T, timeout time.Duration, env []string, script string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s", script, err, stdout.String())
	}
	return stdout.Bytes()
}
