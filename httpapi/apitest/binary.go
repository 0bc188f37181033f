package apitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// Binary returns the path of the taskflow server binary (the module's main
// package, as `go run .` serves it), built once per test process, for tests
// that start real server processes.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "taskflow-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "taskflow")
		if out, err := exec.Command("go", "build", "-o", binPath, "taskflow").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveBinary deletes what Binary built; call it from TestMain after m.Run.
func RemoveBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}
