package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// outboxDDL is Debezium's outbox table, as the README documents it.
const outboxDDL = `CREATE TABLE %s (
	id            uuid PRIMARY KEY,
	aggregatetype varchar(255) NOT NULL,
	aggregateid   varchar(255) NOT NULL,
	type          varchar(255) NOT NULL,
	payload       jsonb
)`

var (
	aggTypes   = [...]string{"order", "customer", "payment", "shipment"}
	eventTypes = [...][3]string{
		{"OrderCreated", "OrderPaid", "OrderShipped"},
		{"CustomerCreated", "CustomerUpdated", "AddressChanged"},
		{"PaymentAuthorized", "PaymentCaptured", "PaymentRefunded"},
		{"ShipmentCreated", "ShipmentDispatched", "ShipmentDelivered"},
	}
)

// minPayload is the longest payload skeleton (three items, the largest
// numbers) with an empty note; a payload is padded to its size with the note.
const minPayload = 360

// workload makes the events of a run. Event seq depends only on the seed
// and seq, so writers can commit events in parallel and the producer
// ceiling can make the same records again without reading them back.
type workload struct {
	seed       uint64
	aggregates int
	payload    int
	// headers: rows have a headers column with a traceparent.
	headers bool
	filler  []byte
}

func newWorkload(seed uint64, aggregates, payload int) *workload {
	w := &workload{seed: seed, aggregates: aggregates, payload: payload}
	r := rand.New(rand.NewPCG(seed, 0x0b0c5))
	w.filler = make([]byte, 8192+payload)
	for i := range w.filler {
		if c := r.IntN(32); c < 26 {
			w.filler[i] = byte('a' + c)
		} else {
			w.filler[i] = ' '
		}
	}
	return w
}

// event is one generated outbox row; its slices are reused by the next
// fill.
type event struct {
	seq     int
	id      []byte // uuid text
	aggType string
	aggID   []byte
	typ     string
	payload []byte // the text PostgreSQL's jsonb output gives back
}

func (w *workload) hash(seq, salt uint64) uint64 {
	// splitmix64
	z := w.seed*0x9e3779b97f4a7c15 + seq*0xbf58476d1ce4e5b9 + salt
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fill makes event seq into e.
func (w *workload) fill(seq int, e *event) {
	h := w.hash(uint64(seq), 1)
	t := int(h % uint64(len(aggTypes)))
	agg := int(h>>8) % w.aggregates
	e.seq = seq
	e.id = appendID(e.id[:0], w.seed, seq)
	e.aggType = aggTypes[t]
	e.aggID = strconv.AppendInt(append(append(e.aggID[:0], aggTypes[t]...), '-'), int64(agg), 10)
	e.typ = eventTypes[t][(h>>40)%3]
	e.payload = w.appendPayload(e.payload[:0], seq, h, e)
}

// appendID writes a UUID in PostgreSQL's output form that names seq, so a
// record's id header says which event it is.
func appendID(b []byte, seed uint64, seq int) []byte {
	return fmt.Appendf(b, "%08x-0000-4000-8000-%012x", uint32(seed), seq)
}

// seqOfID is the inverse of appendID.
func seqOfID(id []byte) (int, bool) {
	if len(id) != 36 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(id[24:]), 16, 48)
	return int(n), err == nil
}

// appendPayload writes a JSON order-ish document exactly as jsonb prints it
// (keys ordered by length then bytes, ", " and ": " separators), so that the
// value in Kafka equals what was generated.
func (w *workload) appendPayload(b []byte, seq int, h uint64, e *event) []byte {
	start := len(b)
	b = append(b, `{"id": `...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `, "note": "`...)
	noteAt := len(b)
	b = append(b, `", "type": "`...)
	b = append(b, e.typ...)
	b = append(b, `", "items": [`...)
	items := 1 + int(h>>20)%3
	total := 0
	for i := range items {
		hi := w.hash(uint64(seq), uint64(2+i))
		qty := 1 + int(hi%9)
		price := 100 + int(hi>>8)%99900 // cents
		total += qty * price
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `{"qty": `...)
		b = strconv.AppendInt(b, int64(qty), 10)
		b = append(b, `, "sku": "SKU-`...)
		b = fmt.Appendf(b, "%06d", int(hi>>24)%1000000)
		b = append(b, `", "price": `...)
		b = appendCents(b, price)
		b = append(b, '}')
	}
	b = append(b, `], "total": `...)
	b = appendCents(b, total)
	cust := int(h>>44) % 100000
	b = append(b, `, "currency": "EUR", "customer": {"id": `...)
	b = strconv.AppendInt(b, int64(cust), 10)
	b = append(b, `, "name": "Customer `...)
	b = strconv.AppendInt(b, int64(cust), 10)
	b = append(b, `", "email": "customer`...)
	b = strconv.AppendInt(b, int64(cust), 10)
	b = append(b, `@example.com"}, "aggregate": "`...)
	b = append(b, e.aggID...)
	b = append(b, `"}`...)

	// Pad with the note, inserted where it belongs.
	pad := w.payload - (len(b) - start)
	if pad <= 0 {
		return b
	}
	off := int(h>>16) % (len(w.filler) - pad)
	b = append(b, w.filler[:pad]...) // grow by pad
	copy(b[noteAt+pad:], b[noteAt:len(b)-pad])
	copy(b[noteAt:], w.filler[off:off+pad])
	// A word run, not spaces at either end.
	b[noteAt], b[noteAt+pad-1] = 'x', 'x'
	return b
}

func appendCents(b []byte, cents int) []byte {
	b = strconv.AppendInt(b, int64(cents/100), 10)
	b = append(b, '.')
	if c := cents % 100; c < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(cents%100), 10)
}

// txnSizes splits events into transactions of 1 to max rows.
func txnSizes(seed uint64, events, max int) []int {
	r := rand.New(rand.NewPCG(seed, 0x7a5))
	var sizes []int
	for left := events; left > 0; {
		n := min(left, 1+r.IntN(max))
		sizes = append(sizes, n)
		left -= n
	}
	return sizes
}

// txnWriter commits generated events on one connection, one transaction in
// one round trip.
type txnWriter struct {
	conn  *pgconn.PgConn
	table string
	w     *workload
	sql   []byte
	e     event
}

// commit inserts events from, from+1, ..., from+n-1 in one transaction.
func (tw *txnWriter) commit(ctx context.Context, from, n int) error {
	b := append(tw.sql[:0], "BEGIN;INSERT INTO "...)
	b = append(b, tw.table...)
	if tw.w.headers {
		b = append(b, " (id, aggregatetype, aggregateid, type, payload, headers) VALUES "...)
	} else {
		b = append(b, " (id, aggregatetype, aggregateid, type, payload) VALUES "...)
	}
	for i := range n {
		tw.w.fill(from+i, &tw.e)
		if i > 0 {
			b = append(b, ',')
		}
		// Generated values hold no quotes or backslashes.
		b = append(b, "('"...)
		b = append(b, tw.e.id...)
		b = append(b, "','"...)
		b = append(b, tw.e.aggType...)
		b = append(b, "','"...)
		b = append(b, tw.e.aggID...)
		b = append(b, "','"...)
		b = append(b, tw.e.typ...)
		b = append(b, "','"...)
		b = append(b, tw.e.payload...)
		if tw.w.headers {
			// A trace of its own for each event, as each request of an
			// application would have.
			b = fmt.Appendf(b, `','{"traceparent": "00-%032x-%016x-01"}`, from+i+1, from+i+1)
		}
		b = append(b, "')"...)
	}
	b = append(b, ";COMMIT"...)
	tw.sql = b
	_, err := tw.conn.Exec(ctx, string(b)).ReadAll()
	if err != nil {
		return fmt.Errorf("commit events %d..%d: %w", from, from+n-1, err)
	}
	return nil
}
