package app

import "runtime/debug"

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
// CPU per event and drained faster, for 1-2 MiB more peak RSS; 200 took
// no less than 150 and peaked 2-3 MiB higher again, above the 32 MiB the
// default configuration is sized for. A memory limit, GOMEMLIMIT or the
// one taken from the container (limitMemory), still bounds the heap.
func setGC(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return "GOGC=" + v
	}
	debug.SetGCPercent(gcPercent)
	return "150 (GOGC not set)"
}
