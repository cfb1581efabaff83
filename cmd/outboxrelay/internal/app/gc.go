package app

import (
	"fmt"
	"runtime/debug"
)

// gcPercent is the GOGC the relay runs with when GOGC is not set.
const gcPercent = 150

// setGC sets GOGC to gcPercent when the environment does not set it, and
// returns where it came from, for the start line.
//
// The relay's live heap is small: at the defaults, mostly the records in
// flight, 1-3 MiB. Go's default of 100 then collects every 2-4 MiB
// allocated, and every event allocates about 1.3 KiB (its payload, its
// record), so a drain of 300k events ran some 200 collections, a fifth of
// the relay's CPU. Measured side by side on two cores beside a neighbour
// (docs/performance.md, "The collector"): 150 took about a tenth less
// CPU per event, for 2-3 MiB more peak RSS; 200 took no less than 150
// and peaked 1-2 MiB higher again.
//
// A heap at the bound its configuration allows could then grow past the
// peak docs/operations.md#memory-sizing gives it (sized, config.Memory's
// Peak, worked out for GOGC 100). So the runtime gets a soft memory limit
// of that peak less the binary's pages, which it does not count, unless
// GOMEMLIMIT is set or the limit taken from the container (container, 0
// for none) is lower already.
func setGC(getenv func(string) string, sized, container int64) string {
	if v := getenv("GOGC"); v != "" {
		return "GOGC=" + v
	}
	debug.SetGCPercent(gcPercent)
	limit := sized - binaryPages
	if getenv("GOMEMLIMIT") != "" || (container > 0 && container <= limit) {
		return "150 (GOGC not set)"
	}
	debug.SetMemoryLimit(limit)
	return fmt.Sprintf("150 (GOGC not set), under a memory limit of %d MiB: the configuration's peak less the binary's pages", limit>>20)
}

// binaryPages is what of the relay's resident memory is its binary's
// pages, which the Go runtime does not count against its memory limit:
// 16-18 MiB as it starts, 11-12 once it has released those only its start
// touched (pages.go; docs/performance.md, "Memory"). The limit takes the
// larger, which leaves the heap the less.
const binaryPages = 20 << 20
