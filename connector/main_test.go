package connector

import (
	"testing"

	"go.uber.org/goleak"
)

// The runner owns the source's goroutine and its timers: a test that
// leaves one running fails the package.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
