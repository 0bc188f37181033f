package httpapi

import (
	"runtime"
	"testing"
)

// HeapHeld runs hold, and fails t, naming what hold keeps, when the live
// heap after it is over bound bytes larger than before it: what a server
// keeps for a request (a connection, a subscription, an upload on its way)
// must not pin the bytes the request came in. The heap is measured after a
// collection on both sides (HeapAlloc: live objects only), with the value
// hold returns kept alive until then, so that what hold keeps is weighed.
// It weighs the process's heap: its tests do not run in parallel. It is
// here, exported in a test file, for the tests of package httpapi_test
// too.
func HeapHeld(t testing.TB, bound int64, what string, hold func() any) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := hold()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grew > bound {
		t.Errorf("%s hold %.1f MiB of the heap, over %d MiB", what, float64(grew)/(1<<20), bound>>20)
	} else {
		t.Logf("%s hold %.1f MiB of the heap (at most %d MiB)", what, float64(grew)/(1<<20), bound>>20)
	}
}
