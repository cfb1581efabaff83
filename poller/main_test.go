package poller_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
