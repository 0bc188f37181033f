package loadgen

import (
	"os"
	"testing"
	"time"
)

func TestProcCPUOfThisProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, ok := procCPU(os.Getpid()); !ok {
		t.Error("procCPU of this process: not read")
	}
	if _, ok := backendCPU(os.Getpid()); !ok {
		t.Error("backendCPU of this process: not read")
	}
	if _, ok := procCPU(-1); ok {
		t.Error("procCPU(-1) read something")
	}
}

// A backend born during the run counts whole; one present before and after
// counts its difference; a run without any backend, or one unreadable, is
// not measured (-1), nor is a server that could not be read.
func TestCPUUsed(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	before := cpuSnapshot{server: 100 * ms, serverOK: true, pgOK: true, backends: map[int]time.Duration{1: 10 * ms, 2: 20 * ms}}
	after := cpuSnapshot{server: 180 * ms, serverOK: true, pgOK: true, backends: map[int]time.Duration{1: 15 * ms, 2: 20 * ms, 3: 7 * ms}}
	if server, pg := cpuUsed(before, after); server != 80*ms || pg != 12*ms {
		t.Errorf("cpuUsed = %v, %v; want 80ms, 12ms", server, pg)
	}
	none := cpuSnapshot{pgOK: true, backends: map[int]time.Duration{}}
	if server, pg := cpuUsed(none, none); server != -1 || pg != -1 {
		t.Errorf("cpuUsed of nothing = %v, %v; want -1, -1", server, pg)
	}
	unreadable := after
	unreadable.pgOK = false
	if _, pg := cpuUsed(before, unreadable); pg != -1 {
		t.Errorf("cpuUsed with an unreadable backend = %v; want -1", pg)
	}
}

func TestWithApplicationName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u@h:5432/db?sslmode=disable": "postgres://u@h:5432/db?application_name=taskflow&sslmode=disable",
		"postgres://u@h/db?application_name=x":   "postgres://u@h/db?application_name=taskflow",
		"host=h dbname=db":                       "host=h dbname=db application_name=taskflow",
	} {
		if got := withApplicationName(in, "taskflow"); got != want {
			t.Errorf("withApplicationName(%q) = %q, want %q", in, got, want)
		}
	}
}
