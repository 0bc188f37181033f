package apitest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Pattern returns n bytes for test files: the decimal seed, then 0, 1, ...
// 250, 0, 1, ... (files of different seeds differ; none compresses to nothing).
func Pattern(seed int, n int64) io.Reader {
	return io.LimitReader(io.MultiReader(strings.NewReader(strconv.Itoa(seed)), &counting{}), n)
}

// counting yields 0, 1, ... 250, 0, 1, ...
type counting struct{ b byte }

// Read fills p.
func (c *counting) Read(p []byte) (int, error) {
	for k := range p {
		p[k] = c.b
		c.b = (c.b + 1) % 251
	}
	return len(p), nil
}

// ProcStatus returns a memory field of /proc/<pid>/status (VmRSS, VmHWM) in
// bytes, on Linux; "self" is this process.
func ProcStatus(pid, field string) (int64, error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%s/status has no %s", pid, field)
}

// ResetPeakRSS resets the high-water mark of the resident memory of the
// process pid ("self" for this one), VmHWM, to its current RSS.
func ResetPeakRSS(pid string) error {
	return os.WriteFile("/proc/"+pid+"/clear_refs", []byte("5"), 0)
}

// NewTask makes a workspace with user as its role, a project and a task in
// it, through SQL, and returns the task's id.
func (e *Env) NewTask(t testing.TB, user User, role string) string {
	t.Helper()
	var task string
	err := e.DB.Pool.QueryRow(context.Background(), `WITH w AS (INSERT INTO workspaces (name) VALUES ('w') RETURNING id),
		m AS (INSERT INTO members (workspace_id, user_id, role) SELECT id, $1, $2 FROM w),
		p AS (INSERT INTO projects (workspace_id, name) SELECT id, 'p' FROM w RETURNING id, workspace_id)
		INSERT INTO tasks (project_id, workspace_id, title, created_by) SELECT id, workspace_id, 't', $1 FROM p RETURNING id`,
		user.ID, role).Scan(&task)
	if err != nil {
		t.Fatal(err)
	}
	return task
}
