package config

import "fmt"

// BrokerMaxMessageBytes is Kafka's default message.max.bytes (1 MiB and a
// record batch's header), the record limit when kafka.max_record_bytes is
// unset and the brokers keep their default.
const BrokerMaxMessageBytes = 1048588

// Memory is the memory to allow the relay at a configuration, in bytes,
// by part (docs/operations.md#memory-sizing). It covers events up to
// kafka.max_record_bytes; a row larger than that costs twice its size on
// top while it is read (the message as received and the event's copy).
type Memory struct {
	// Record is the record limit it was worked out for: kafka.max_record_bytes,
	// or BrokerMaxMessageBytes when that is unset.
	Record int64
	// Base is the runtime, the binary's pages, connections and metrics:
	// a relay draining small records peaks at 30-37 MiB, 22-23 MiB of it
	// its binary's file pages (docs/performance.md#memory).
	Base int64
	// Source is what the source holds: the poller, claims × (a claim's
	// rows, at most poll.max_batch_bytes or one row of Record, plus pgx's
	// read buffer of one row, Record rounded up to a power of two); CDC,
	// the batch being read and the one being published (each
	// cdc.max_batch_bytes and one row past it) and the message being
	// received (the same buffer).
	Source int64
	// Sink is kafka.max_buffered_bytes of records, and as much again for
	// the produce requests that carry them and for records that a
	// Debezium converter builds apart from the event.
	Sink int64
}

// Live is what may be in use at once.
func (m Memory) Live() int64 { return m.Source + m.Sink }

// Peak is the resident memory to allow, the container's memory limit:
// Base plus twice Live, since with Go's default GOGC of 100 the heap grows
// to twice what is live before a collection. The relay sets no limit from
// it; the runtime's soft limit comes from the container's
// (cmd/outboxrelay/internal/app/memlimit.go).
func (m Memory) Peak() int64 { return m.Base + 2*m.Live() }

func (m Memory) String() string {
	const mib = 1 << 20
	return fmt.Sprintf("%d MiB = base %d MiB + 2 × (source %d MiB + sink %d MiB), for records up to %d bytes",
		ceilDiv(m.Peak(), mib), m.Base/mib, ceilDiv(m.Source, mib), ceilDiv(m.Sink, mib), m.Record)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Memory is the memory to allow the relay with c's settings (defaults
// filled in as each component fills them in).
func (c *Config) Memory() Memory {
	sc := c.SinkConfig()
	sc.SetDefaults()
	r := int64(sc.MaxRecordBytes)
	if r == 0 {
		r = BrokerMaxMessageBytes
	}
	m := Memory{Record: r, Base: 40 << 20, Sink: 2 * int64(sc.MaxBufferedBytes)}
	readBuf := pow2(r)
	if c.Source == "poll" {
		pc := c.PollConfig()
		pc.SetDefaults()
		m.Source = int64(pc.Claims) * (max(int64(pc.MaxBatchBytes), r) + readBuf)
	} else {
		cc := c.CDCConfig()
		cc.SetDefaults()
		m.Source = 2*(int64(cc.MaxBatchBytes)+r) + readBuf
	}
	return m
}

// pow2 is the least power of two not below n: pgx's read buffers come in
// those sizes.
func pow2(n int64) int64 {
	p := int64(1)
	for p < n {
		p <<= 1
	}
	return p
}
