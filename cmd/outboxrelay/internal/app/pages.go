package app

import (
	"context"
	"errors"
	"log/slog"
)

// releasePagesAfterStart waits for Kafka's first acknowledgement of an
// event (acked) and then releases the binary's pages from the process's
// resident memory (releaseBinaryPages), once.
//
// Starting touches most of the binary: the initialisers of some 230
// packages spread over its code, the configuration, the connections, and
// the stacks the runtime copies as they grow, which read its tables. The
// kernel maps a file 64 KiB at a time around each page the process
// touches, so a relay that has started holds 16-18 MiB of its 25 MB
// binary, which was 60% of its peak in a drain. Relaying itself uses some
// 11 MiB of them (docs/performance.md, "Releasing what start touched").
// Once an event has gone all the way to Kafka, every path of the steady
// state has run: the pages it touches again come back as it does, and the
// rest, start's alone, no longer count against the relay. They stay in the
// page cache, where the kernel may reclaim them, so this lowers what the
// relay holds (its RSS, which the OOM killer weighs) rather than what the
// node has cached.
func releasePagesAfterStart(ctx context.Context, acked <-chan struct{}, log *slog.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-acked:
	}
	held, err := releaseBinaryPages()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		log.Info("could not release the binary's pages after start; the relay holds the ones its start touched", "component", "app", "err", err)
	default:
		log.Info("first event in Kafka: released the binary's pages that start touched; those relaying uses come back as it does", "component", "app", "binary_resident_mib", held>>20)
	}
}
