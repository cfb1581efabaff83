package integration

import (
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPIEBinaryRelays builds the relay as a position-independent
// executable, as Alpine's Go and several distributions' packaging do by
// default, and relays 2,000 events through it: each arrives once, and the
// relay is still running after the last.
func TestPIEBinaryRelays(t *testing.T) {
	t.Parallel()
	bin := buildPIE(t)
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	p := startBinaryAt(t, bin, []string{"run", "--config", writeTemp(t, "outboxrelay.yaml", e.cdcConfig(""))})
	waitSlotActive(ctx, t, e.pool, e.name)
	c := newCollector(t, e.brokers, "outbox.event.order")

	ids := insertEvents(ctx, t, e.pool, 2000)
	c.readAtLeast(ctx, t, len(ids), 2*time.Minute)
	c.settle(300 * time.Millisecond)
	for _, id := range ids {
		if c.ids[id] != 1 {
			t.Errorf("event %s is in Kafka %d times, want once", id, c.ids[id])
		}
	}
	if p.cmd.ProcessState != nil || p.cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Errorf("the PIE relay exited after relaying; output:\n%s", p.out.String())
	}
}

// buildPIE builds cmd/outboxrelay with -buildmode=pie into a temporary
// directory, skipping the test where the toolchain cannot build PIE for
// this platform, and checks the result is one.
func buildPIE(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outboxrelay")
	out, err := exec.Command("go", "build", "-buildmode=pie", "-o", bin, "github.com/outboxrelay/outboxrelay/cmd/outboxrelay").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not supported") {
			t.Skipf("the toolchain cannot build PIE here: %s", out)
		}
		t.Fatalf("go build -buildmode=pie: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		t.Fatalf("the binary built with -buildmode=pie is of ELF type %v, want %v", f.Type, elf.ET_DYN)
	}
	return bin
}
