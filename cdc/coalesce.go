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
// a context switch and a wakeup on both sides per event. On few cores
// that mode feeds itself: the relay spends its CPU on wakeups rather than
// on events, the walsender loses the time it needs, and so the relay
// stays caught up, draining the backlog far slower than it could.
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

// bulkRead is how the socket wakes the stream: coalescing while it wakes
// it only for a backlog's worth of bytes, backlog while the server sends
// transactions well after they committed; failed once setting
// SO_RCVLOWAT failed.
type bulkRead struct{ coalescing, backlog, failed bool }

// noteLag switches bulk reading on or off by how late the transaction the
// server just began sending is.
func (st *stream) noteLag(sent, committed time.Time) {
	b := &st.bulk
	want := sent.Sub(committed) >= coalesceLag
	b.backlog = want
	if want == b.coalescing {
		return
	}
	n := 1
	if want {
		n = coalesceBytes
	}
	if err := setRcvLowat(st.conn.Conn(), n); err != nil {
		// Only the cost per event is at stake, not an event: say so once.
		if !b.failed {
			b.failed = true
			st.src.log.Debug("cannot read the backlog in bulk; reading it message by message", "slot", st.src.cfg.Slot, "err", err)
		}
		return
	}
	b.coalescing = want
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
	if !st.bulk.coalescing && len(st.batch.held.done) == 0 {
		return want
	}
	if set.After(now) && !set.After(want) && !set.After(now.Add(coalesceWait)) {
		return set
	}
	return minTime(want, now.Add(coalesceWait))
}

// stopCoalescing wakes the stream for every byte again.
func (st *stream) stopCoalescing() {
	if st.bulk.coalescing {
		_ = setRcvLowat(st.conn.Conn(), 1)
		st.bulk.coalescing = false
	}
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
// (a Unix socket) accept it and go on waking for every byte.
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
// transaction and small transactions, that is a produce request per
// transaction with a few records in each partition's batch, and the
// broker's CPU and the relay's go on requests rather than records. So
// while the stream is a backlog, whole transactions are held and handed
// on together, up to holdEvents or holdBytes, or coalesceWait after the
// first began to arrive, or when a read finds nothing more for now.
// Caught up, each transaction goes on at its commit.
//
// What is held comes on top of the records in flight
// (kafka.max_buffered_records), so the bound is small: a larger one fills
// each partition's batch a little more, and costs memory for it.
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
	h, received := &st.batch.held, st.txn.stages.Received
	if len(h.done) == 0 {
		h.since = received
	}
	h.done = append(h.done, done)
	if mark != nil {
		h.mark = mark
	}
	h.n, h.bytes = len(st.batch.events), st.batch.bytes
	if st.bulk.backlog && h.n < holdEvents && h.bytes < holdBytes && received.Sub(h.since) < coalesceWait {
		return nil
	}
	return st.release(ctx)
}

// release hands on what is held, as one batch whose Done calls each
// transaction's in commit order; events of the transaction being received
// stay in the batch.
func (st *stream) release(ctx context.Context) error {
	h := st.batch.held
	if len(h.done) == 0 {
		return nil
	}
	st.batch.held = held{}
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
