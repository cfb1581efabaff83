package connector

// Size is the size m takes as a record in an uncompressed v2 record batch
// of its own, batch header included: what a broker compares with
// message.max.bytes, and the Java client with max.request.size. The Kafka
// sink checks this size before it produces (sink's
// TestRecordLimitIsTheBrokers holds it to the broker to the byte), so the
// runner can tell whether a dead letter record fits the limit a refusal
// named without asking the sink again.
func (m *Message) Size() int {
	const batchOverhead = 61 // the v2 record batch header
	body := 1 +              // attributes
		varintLen(0) + // timestamp delta
		varintLen(0) + // offset delta
		bytesLen(m.Key) + bytesLen(m.Value) +
		varintLen(int64(len(m.Headers)))
	for _, h := range m.Headers {
		body += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return batchOverhead + varintLen(int64(body)) + body
}

func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the length of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
