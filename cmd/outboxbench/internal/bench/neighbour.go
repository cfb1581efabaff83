package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// neighbourPeriod is the neighbour's duty cycle: each of its spinners
// burns its share of every period and sleeps the rest, as a busy
// neighbour on a shared node takes its slices of the scheduler.
const neighbourPeriod = 10 * time.Millisecond

// NeighbourMain is `outboxbench neighbour`: it burns -cores CPUs' worth
// of time (1.5: one core and half another) in a process of its own, until
// stdin closes or ctx ends. It makes a fast machine as busy as a shared
// one, so that what a busy neighbour does to the relay can be produced
// anywhere (-neighbour).
func NeighbourMain(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) error {
	fs := flag.NewFlagSet("neighbour", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cores := fs.Float64("cores", 0.5, "CPUs' worth of time to burn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cores <= 0 {
		return fmt.Errorf("-cores %v: must be above 0", *cores)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	n := int(math.Ceil(*cores))
	runtime.GOMAXPROCS(n)
	var wg sync.WaitGroup
	for i := range n {
		share := min(*cores-float64(i), 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			spin(ctx, share)
		}()
	}
	wg.Wait()
	return nil
}

// spin burns share of each neighbourPeriod on one thread until ctx ends.
func spin(ctx context.Context, share float64) {
	runtime.LockOSThread()
	busy := time.Duration(share * float64(neighbourPeriod))
	x := uint64(1)
	for ctx.Err() == nil {
		start := time.Now()
		for time.Since(start) < busy {
			for range 1000 {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		if rest := neighbourPeriod - time.Since(start); rest > 0 {
			time.Sleep(rest)
		}
	}
	if x == 0 { // keeps the loop from being optimised away
		fmt.Fprint(io.Discard, x)
	}
}

// neighbour is a running `outboxbench neighbour`.
type neighbour struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startNeighbour runs this program as `outboxbench neighbour`, burning
// cores CPUs' worth of time until stop.
func startNeighbour(self string, cores float64) (*neighbour, error) {
	cmd := exec.Command(self, "neighbour", "-cores", strconv.FormatFloat(cores, 'f', -1, 64))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the neighbour: %w", err)
	}
	return &neighbour{cmd: cmd, stdin: in}, nil
}

func (n *neighbour) stop() {
	_ = n.stdin.Close()
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
}

// parseCPUList parses a CPU list as taskset(1) and cgroups write it:
// "0", "0,1", "0-3,6".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number or range", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: %q is not a CPU number or range", s, part)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// startPinned starts cmd on cpus: the child inherits the CPU mask of the
// thread that forks it, so that thread is pinned for the start and
// restored after. Every thread of the child then stays on cpus. No cpus
// starts cmd as it is.
func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return err
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPUs %v: %w", cpus, err)
	}
	defer func() { _ = unix.SchedSetaffinity(0, &was) }()
	return cmd.Start()
}
