package webhook_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a River
// client, a dispatcher or an attempt that Stop did not end. The expiring
// caches of the store (otter) keep a cleanup goroutine until the cache is
// collected; those are not a leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/maypok86/otter/v2.periodicCleanUp[...]"))
}
