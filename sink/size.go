package sink

import (
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchOverhead is the v2 record batch header, which the broker counts
// against message.max.bytes along with the records.
const batchOverhead = 61

// RecordSize is the size a record takes in an uncompressed v2 record batch
// of its own, header included: what a broker compares with
// message.max.bytes, and what the Java client compares with
// max.request.size.
func RecordSize(r *kgo.Record) int {
	body := 1 + // attributes
		varintLen(0) + // timestamp delta
		varintLen(0) + // offset delta
		bytesLen(r.Key) + bytesLen(r.Value) +
		varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
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
