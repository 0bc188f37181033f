package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// Without GOGC the collector's target is defaultGCPercent; with it, Go's
// reading of GOGC stands. Not parallel: the target is the process's.
func TestSetGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	setGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("without GOGC: %d, want %d", got, defaultGCPercent)
	}
	setGCPercent(func(name string) string {
		if name == "GOGC" {
			return "50"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: the target moved to %d", got)
	}
}

// Without GOMEMLIMIT the soft memory limit is memoryLimitPercent of the
// container's (cgroup v2, else v1); with it, or without a container limit,
// Go's reading of GOMEMLIMIT stands. Not parallel: the limit is the
// process's.
func TestSetMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	files := func(contents map[string]string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if c, ok := contents[path]; ok {
				return []byte(c), nil
			}
			return nil, os.ErrNotExist
		}
	}
	unset := func(string) string { return "" }
	const mib = 1 << 20
	for _, c := range []struct {
		name   string
		getenv func(string) string
		files  map[string]string
		want   int64 // 0: the limit is left as it was
	}{
		{"cgroup v2", unset, map[string]string{cgroupMemoryFiles[0]: "536870912\n"}, 512 * mib / 100 * memoryLimitPercent},
		{"cgroup v1", unset, map[string]string{cgroupMemoryFiles[1]: "1073741824\n"}, 1024 * mib / 100 * memoryLimitPercent},
		{"v2 without a limit", unset, map[string]string{cgroupMemoryFiles[0]: "max\n", cgroupMemoryFiles[1]: "1073741824"}, 0},
		{"v1 without a limit", unset, map[string]string{cgroupMemoryFiles[1]: "9223372036854771712\n"}, 0},
		{"no cgroup", unset, nil, 0},
		{"GOMEMLIMIT set", func(name string) string {
			if name == "GOMEMLIMIT" {
				return "100MiB"
			}
			return ""
		}, map[string]string{cgroupMemoryFiles[0]: "536870912"}, 0},
	} {
		debug.SetMemoryLimit(before)
		got := setMemoryLimit(c.getenv, files(c.files))
		now := debug.SetMemoryLimit(-1)
		if got != c.want || (c.want != 0 && now != c.want) || (c.want == 0 && now != before) {
			t.Errorf("%s: set %d, the limit is %d; want %d", c.name, got, now, c.want)
		}
	}
}
