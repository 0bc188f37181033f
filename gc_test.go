package main

import (
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
