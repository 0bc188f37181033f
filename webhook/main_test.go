package webhook_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a River
// client, a dispatcher or an attempt that Stop did not end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
