package cdc

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"
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
// receive loop wants and the one set now: while coalescing, at most
// coalesceWait away, and the one set kept while it is within that, so that
// the deadline is not moved for every message.
func (st *stream) readDeadline(now, want, set time.Time) time.Time {
	if !st.coalescing {
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
