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
// not measured (-1), nor is a server that could not be read, nor this
// process when the meter did not read it.
func TestCPUUsed(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	before := cpuSnapshot{server: 100 * ms, serverOK: true, self: 40 * ms, pgOK: true, backends: map[int]time.Duration{1: 10 * ms, 2: 20 * ms}}
	after := cpuSnapshot{server: 180 * ms, serverOK: true, self: 43 * ms, pgOK: true, backends: map[int]time.Duration{1: 15 * ms, 2: 20 * ms, 3: 7 * ms}}
	if server, pg, self := cpuUsed(before, after); server != 80*ms || pg != 12*ms || self != 3*ms {
		t.Errorf("cpuUsed = %v, %v, %v; want 80ms, 12ms, 3ms", server, pg, self)
	}
	none := cpuSnapshot{self: -1, pgOK: true, backends: map[int]time.Duration{}}
	if server, pg, self := cpuUsed(none, none); server != -1 || pg != -1 || self != -1 {
		t.Errorf("cpuUsed of nothing = %v, %v, %v; want -1, -1, -1", server, pg, self)
	}
	unreadable := after
	unreadable.pgOK = false
	if _, pg, _ := cpuUsed(before, unreadable); pg != -1 {
		t.Errorf("cpuUsed with an unreadable backend = %v; want -1", pg)
	}
}

// selfCPU sees the work this process did between two readings.
func TestSelfCPU(t *testing.T) {
	t.Parallel()
	before := selfCPU()
	x := 0
	for deadline := time.Now().Add(30 * time.Millisecond); time.Now().Before(deadline); {
		x++
	}
	if used := selfCPU() - before; before < 0 || used < 10*time.Millisecond || x == 0 {
		t.Errorf("30 ms of busy work measured as %v of CPU (from %v)", used, before)
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
