package cdc

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Reading a backlog in bulk. A walsender decoding a backlog sends each
// change as soon as it is decoded. A relay that keeps up with it finds
// its socket empty after every message, and sleeps and wakes for each:
// a context switch and a wakeup on both sides per event. On two shared
// cores that mode feeds itself: the relay's CPU per event triples, the
// walsender loses the time it needs, and so the relay stays caught up.
// Drains seen in it ran at 0.2-0.52x pg_recvlogical's rate with 0.56-0.83
// context switches and up to 0.78 reads and writes per event, against
// 0.02-0.08 and 0.09-0.12 in the others (docs/performance.md, "The slow
// mode").
//
// So while the server sends transactions that committed well before it
// sent them, a backlog that nobody waits on within milliseconds, the
// socket wakes the relay only once coalesceBytes have arrived
// (SO_RCVLOWAT), or at the latest after coalesceWait, when the read
// deadline takes what there is. Caught up, it wakes for every byte again.
const (
	// coalesceLag is how long before the walsender sent a transaction it
	// must have committed for the stream to count as a backlog: both times
	// are the server's, so no clock skew enters. It is well over
	// wal_writer_delay's default, 200 ms, the lag of a live transaction
	// committed with synchronous_commit off.
	coalesceLag = 500 * time.Millisecond
	// coalesceBytes is what the relay waits for: about a hundred
	// 500-byte events, a millisecond of a fast walsender's output.
	coalesceBytes = 64 << 10
	// coalesceWait bounds the wait for them, which adds at most this to
	// events that are already coalesceLag late.
	coalesceWait = 5 * time.Millisecond
)

// noteLag switches bulk reading on or off by how late the transaction the
// server just began sending is.
func (st *stream) noteLag(sent, committed time.Time) {
	want := sent.Sub(committed) >= coalesceLag
	st.backlog = want
	if want == st.coalescing {
		return
	}
	n := 1
	if want {
		n = coalesceBytes
	}
	if err := setRcvLowat(st.conn.Conn(), n); err != nil {
		// Only the cost per event is at stake, not an event: say so once.
		if !st.coalesceFailed {
			st.coalesceFailed = true
			st.src.log.Debug("cannot read the backlog in bulk; reading it message by message", "slot", st.src.cfg.Slot, "err", err)
		}
		return
	}
	st.coalescing = want
	if want {
		st.src.log.Debug("reading a backlog in bulk: the server is sending transactions well after they committed",
			"slot", st.src.cfg.Slot, "behind", sent.Sub(committed).Round(time.Millisecond).String())
	} else {
		st.src.log.Debug("caught up with the server: reading message by message", "slot", st.src.cfg.Slot)
	}
}

// readDeadline is the deadline for the next read, given the one the
// receive loop wants and the one set now: while coalescing or holding
// transactions, at most coalesceWait away, and the one set kept while it
// is within that, so that the deadline is not moved for every message.
func (st *stream) readDeadline(now, want, set time.Time) time.Time {
	if !st.coalescing && len(st.held.done) == 0 {
		return want
	}
	if set.After(now) && !set.After(want) && !set.After(now.Add(coalesceWait)) {
		return set
	}
	return minTime(want, now.Add(coalesceWait))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// setRcvLowat sets the socket's SO_RCVLOWAT: the bytes that must have
// arrived before a reader waiting on it is woken. A read still returns
// whatever has arrived; only the wakeup waits. Sockets that are not TCP
// (a Unix socket) accept it and wake as before.
func setRcvLowat(c net.Conn, n int) error {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = setsockoptRcvLowat(fd, n) }); err != nil {
		return err
	}
	return serr
}

// Handing a backlog on in bulk. The runner takes each batch from the
// stream's goroutine and produces its records; when it waits for the next
// one, franz-go's sender runs and sends what it has. With a batch per
// transaction, that is a produce request per transaction: in the
// benchmark's drain (transactions of 1-100 rows, 32 partitions), 5.3
// records a partition batch, and the broker's CPU and the relay's went on
// requests rather than records. So while the stream is a backlog, whole
// transactions are held and handed on together, up to holdEvents or
// holdBytes, or coalesceWait after the first began to arrive, or when a
// read finds nothing more for now. Caught up, each transaction goes on at
// its commit, as before.
//
// 64 events make 7.5 records a partition batch there. 128 made 11, but
// what is held and handed on comes on top of the records in flight
// (kafka.max_buffered_records), and the peak RSS rose by up to 3 MiB
// (docs/performance.md, "Handing a backlog on in bulk").
const (
	holdEvents = 64
	holdBytes  = 64 << 10
)

// held is the whole transactions at the head of the batch that the stream
// has not handed on yet.
type held struct {
	n, bytes int // their events and bytes
	done     []func(error)
	mark     func() (*connector.Message, error) // the last one's
	since    time.Time                          // when the first began to arrive
}

// hold adds the transaction just committed, its events at the end of the
// batch, to what is held, and hands it all on unless the backlog goes on.
func (st *stream) hold(ctx context.Context, mark func() (*connector.Message, error), done func(error)) error {
	h := &st.held
	if len(h.done) == 0 {
		h.since = st.stages.Received
	}
	h.done = append(h.done, done)
	if mark != nil {
		h.mark = mark
	}
	h.n, h.bytes = len(st.batch), st.batchBytes
	if st.backlog && h.n < holdEvents && h.bytes < holdBytes && st.stages.Received.Sub(h.since) < coalesceWait {
		return nil
	}
	return st.release(ctx)
}

// release hands on what is held, as one batch whose Done calls each
// transaction's in commit order; events of the transaction being received
// stay in the batch.
func (st *stream) release(ctx context.Context) error {
	h := st.held
	if len(h.done) == 0 {
		return nil
	}
	st.held = held{}
	done := h.done[0]
	if len(h.done) > 1 {
		done = func(err error) {
			for _, d := range h.done {
				d(err)
			}
		}
	}
	return st.emitWith(ctx, h.n, h.bytes, h.mark, done)
}
