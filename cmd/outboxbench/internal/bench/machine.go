package bench

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// machine describes this machine and the versions in this binary.
func machine() Machine {
	m := Machine{
		Cores: runtime.NumCPU(),
		OS:    runtime.GOOS + "/" + runtime.GOARCH,
		Go:    runtime.Version(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				m.MemoryMiB = kb >> 10
			}
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/twmb/franz-go":
				m.FranzGo = d.Version
			case "github.com/twmb/franz-go/pkg/kfake":
				m.Kfake = d.Version
			}
		}
	}
	m.LoadBefore = loadAverage()
	return m
}

// loadAverage is the 1, 5 and 15 minute load average.
func loadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	var out []float64
	for _, s := range f[:min(3, len(f))] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// cpuTimes is the machine's busy and total CPU time so far, in clock ticks,
// from the first line of /proc/stat.
type cpuTimes struct{ busy, total uint64 }

func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		t.total += v
		// user nice system idle iowait irq softirq steal ...: idle and
		// iowait are not busy; guest time is already in user.
		if i != 3 && i != 4 && i < 8 {
			t.busy += v
		}
		if i >= 7 {
			break
		}
	}
	return t
}

// busySince is the share of all cores' time that was busy since before.
func busySince(before cpuTimes) float64 {
	now := readCPUTimes()
	if now.total <= before.total {
		return 0
	}
	return float64(now.busy-before.busy) / float64(now.total-before.total)
}
