package app

import (
	"runtime"
)

// fewCPUs is the most CPUs on which the relay runs its goroutines on one
// thread when GOMAXPROCS is not set.
const fewCPUs = 2

// limitProcs runs the Go scheduler with one P when GOMAXPROCS is not set
// and Go's own default (the CPUs, or the container's CPU limit rounded up
// and never below 2) is fewCPUs or less. It returns where the number of Ps
// came from, for the start line.
//
// The relay's work is one ordered stream passed between goroutines: the
// replication loop, the runner, franz-go's producer and its connection.
// With two Ps every hand-over can wake a second thread, and on two cores
// that the relay shares with PostgreSQL and the broker's clients those
// wakeups cost more than the parallelism gains. Measured side by side on
// two cores (docs/performance.md, "One P"): the CDC drain took 20-40%
// less CPU per event and ran as fast or faster, 5k events/s took 20%
// less, and the poller 15-20% less. In a container limited to less than 2
// CPUs, Go's floor of 2 also lets two threads spend the quota, and a quota
// spent early stalls the relay for the rest of the period. On more CPUs
// nothing was measured, so Go's default stands.
func limitProcs(getenv func(string) string) string {
	switch {
	case getenv("GOMAXPROCS") != "":
		return "GOMAXPROCS"
	case runtime.GOMAXPROCS(0) > fewCPUs:
		return "Go's default"
	}
	runtime.GOMAXPROCS(1)
	return "one P on 2 CPUs or fewer (GOMAXPROCS not set)"
}
