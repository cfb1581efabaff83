package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	byteorder "encoding/binary"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The classes of bugs Debezium fixed in 2026, in relays that keep a
// position per event: several events at one position (a COPY or a
// multi-row INSERT commits many rows at once, and PostgreSQL writes the
// rows of one page in one WAL record), and transactional logical messages
// published twice after a restart. This relay keeps its position per
// transaction: the slot is confirmed only to the end of a transaction
// whose every event Kafka has. So a restart publishes again at most the
// transactions the slot had not been confirmed past, each of them whole
// or not at all, and nothing before them; it never skips the rest of one.

// committedTxn is a transaction a test committed: its events' ids, and a
// WAL position at or after its commit record (the insert position read
// once the commit returned).
type committedTxn struct {
	ids   []string
	after pglogrepl.LSN
}

// txnLog records the transactions a test commits. Its methods may be
// called concurrently.
type txnLog struct {
	mu   sync.Mutex
	txns []committedTxn
}

// committed records a transaction of ids that has just committed.
func (l *txnLog) committed(ctx context.Context, pool *pgxpool.Pool, ids []string) error {
	var lsn pglogrepl.LSN
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(lsnScanner{&lsn}); err != nil {
		return fmt.Errorf("read the WAL position after a commit: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txns = append(l.txns, committedTxn{ids: ids, after: lsn})
	return nil
}

// last is where the last transaction recorded ended, or after.
func (l *txnLog) last() pglogrepl.LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.txns[len(l.txns)-1].after
}

// repeatable are the events a relay restarted on a slot confirmed at
// confirmed may publish again: those of every transaction not known to
// end at or before it. A slot sends again only the transactions whose
// commit ends after its confirmed position.
func (l *txnLog) repeatable(confirmed pglogrepl.LSN) map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	may := map[string]bool{}
	for _, txn := range l.txns {
		if txn.after > confirmed {
			for _, id := range txn.ids {
				may[id] = true
			}
		}
	}
	return may
}

// checkRepeats checks what one restart repeated against may, the events
// it may repeat: each event at most twice, and only those of may. It
// returns how many repeated.
func checkRepeats(t *testing.T, c *collector, may map[string]bool) int {
	t.Helper()
	repeats, outside := 0, 0
	for id, n := range c.ids {
		if n < 2 {
			continue
		}
		repeats += n - 1
		switch {
		case n > 2:
			t.Errorf("event %s arrived %d times after one restart", id, n)
		case !may[id]:
			outside++
		}
	}
	if outside > 0 {
		t.Errorf("%d events repeated whose transactions ended at or before the slot's confirmed position: a restart must not publish them again", outside)
	}
	return repeats
}

// newEventID is a random UUID in its text form.
func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])                      // never fails (crypto/rand)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80 // version 4, variant 10
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// outboxEvent is an event to write: its id, aggregate and payload.
type outboxEvent struct{ id, agg, payload string }

// eventWriter writes events to the outbox table one transaction at a
// time, numbering each aggregate's events in commit order (the payload's
// seq), and records each transaction in log. It is used by one goroutine.
type eventWriter struct {
	pool       *pgxpool.Pool
	aggregates int
	next       int
	seq        map[string]int
	log        txnLog
}

func newEventWriter(pool *pgxpool.Pool, aggregates int) *eventWriter {
	return &eventWriter{pool: pool, aggregates: aggregates, seq: map[string]int{}}
}

// events numbers the next n events, round the aggregates.
func (w *eventWriter) events(n int) []outboxEvent {
	evs := make([]outboxEvent, n)
	for i := range evs {
		agg := aggID(w.next % w.aggregates)
		w.next++
		w.seq[agg]++
		evs[i] = outboxEvent{id: newEventID(), agg: agg, payload: fmt.Sprintf(`{"aggregate": %q, "seq": %d}`, agg, w.seq[agg])}
	}
	return evs
}

func ids(evs []outboxEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.id
	}
	return out
}

// insert commits n events in one multi-row INSERT and returns their ids.
func (w *eventWriter) insert(ctx context.Context, t *testing.T, n int) []string {
	t.Helper()
	evs := w.events(n)
	var sql strings.Builder
	sql.WriteString(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES `)
	args := make([]any, 0, 3*n)
	for i, e := range evs {
		if i > 0 {
			sql.WriteString(", ")
		}
		fmt.Fprintf(&sql, "($%d::uuid, 'order', $%d, 'Happened', $%d::jsonb)", 3*i+1, 3*i+2, 3*i+3)
		args = append(args, e.id, e.agg, e.payload)
	}
	if _, err := w.pool.Exec(ctx, sql.String(), args...); err != nil {
		t.Fatalf("multi-row INSERT of %d events: %v", n, err)
	}
	if err := w.log.committed(ctx, w.pool, ids(evs)); err != nil {
		t.Fatal(err)
	}
	return ids(evs)
}

// copy commits n events in one COPY and returns their ids.
func (w *eventWriter) copy(ctx context.Context, t *testing.T, n int) []string {
	t.Helper()
	evs := w.events(n)
	var data bytes.Buffer
	for _, e := range evs {
		fmt.Fprintf(&data, "%s\torder\t%s\tHappened\t%s\n", e.id, e.agg, e.payload)
	}
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, &data, `COPY outbox (id, aggregatetype, aggregateid, type, payload) FROM STDIN`)
	if err != nil || tag.RowsAffected() != int64(n) {
		t.Fatalf("COPY of %d events: %v (%s)", n, err, tag)
	}
	if err := w.log.committed(ctx, w.pool, ids(evs)); err != nil {
		t.Fatal(err)
	}
	return ids(evs)
}

// produceHold lets Produce requests through until they have carried
// after records, then holds every Produce request until released: a relay
// in the middle of publishing, the rest of what it read in its producer.
type produceHold struct {
	cluster *kfake.Cluster
	after   int

	mu       sync.Mutex
	passed   int
	released bool
	once     sync.Once
	held     chan struct{} // closed once a request is held
	release  chan struct{}
}

// holdProduce installs a produceHold on cluster; the test's end releases
// it.
func holdProduce(t *testing.T, cluster *kfake.Cluster, after int) *produceHold {
	h := &produceHold{cluster: cluster, after: after, held: make(chan struct{}), release: make(chan struct{})}
	cluster.ControlKey(int16(kmsg.Produce), h.control)
	t.Cleanup(h.free)
	return h
}

func (h *produceHold) control(req kmsg.Request) (kmsg.Response, error, bool) {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		h.cluster.DropControl()
		return nil, nil, false
	}
	if h.passed < h.after {
		h.passed += producedRecords(req.(*kmsg.ProduceRequest))
		h.mu.Unlock()
		return nil, nil, false
	}
	h.mu.Unlock()
	h.once.Do(func() { close(h.held) })
	h.cluster.SleepControl(func() { <-h.release })
	return nil, nil, false
}

// free lets the held requests, and every later one, through.
func (h *produceHold) free() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.released {
		h.released = true
		close(h.release)
	}
}

// producedRecords counts the records of a Produce request's batches.
func producedRecords(req *kmsg.ProduceRequest) int {
	n := 0
	for _, tp := range req.Topics {
		for _, p := range tp.Partitions {
			for b := p.Records; len(b) >= 12; {
				end := 12 + int(int32(byteorder.BigEndian.Uint32(b[8:12])))
				if end < 12 || end > len(b) {
					break
				}
				var rb kmsg.RecordBatch
				if rb.ReadFrom(b[:end]) == nil {
					n += int(rb.NumRecords)
				}
				b = b[end:]
			}
		}
	}
	return n
}

// killedRelay is the relay binary on a fresh database and broker, which a
// test kills with SIGKILL while it publishes.
type killedRelay struct {
	pool    *pgxpool.Pool
	cluster *kfake.Cluster
	brokers []string
	slot    string
	cfg     string
	p       *proc
	c       *collector
}

func startKilledRelay(t *testing.T, cdcExtra string) *killedRelay {
	t.Helper()
	url := testenv.Postgres(t)
	k := &killedRelay{pool: connectPool(t, url), slot: uniqueName(t)}
	createOutbox(t, k.pool, "outbox")
	k.cluster, k.brokers = testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	k.cfg = yamlConfig(url, k.brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n%s", k.slot, k.slot, cdcExtra))
	k.p = runBinary(t, k.cfg)
	waitSlotActive(context.Background(), t, k.pool, k.slot)
	k.c = newCollector(t, k.brokers, "outbox.event.order")
	return k
}

// kill kills the relay with SIGKILL and returns the slot's confirmed
// position once its walsender has let go: where the next relay resumes.
func (k *killedRelay) kill(ctx context.Context, t *testing.T) pglogrepl.LSN {
	t.Helper()
	k.p.signal(t, syscall.SIGKILL, 10*time.Second)
	waitSlotReleased(ctx, t, k.pool, k.slot)
	return slotConfirmed(ctx, t, k.pool, k.slot)
}

// restart starts the relay again, on the same slot and config.
func (k *killedRelay) restart(t *testing.T) { k.p = runBinary(t, k.cfg) }

// stop stops the relay with SIGTERM, which must end it cleanly.
func (k *killedRelay) stop(t *testing.T) {
	t.Helper()
	if code := k.p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// waitConfirmed waits until the slot is confirmed to at least lsn.
func waitConfirmed(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string, lsn pglogrepl.LSN) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); slotConfirmed(ctx, t, pool, slot) < lsn; {
		if time.Now().After(deadline) {
			t.Fatalf("slot %s not confirmed to %s within 30s (at %s)", slot, lsn, slotConfirmed(ctx, t, pool, slot))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCDCOneCommitManyEventsKilled relays transactions of many events that
// share their commit, and PostgreSQL's multi-insert WAL records, through
// a SIGKILL of the relay in the middle of publishing them: a COPY of
// 20,000 rows, and a run of 250-row INSERTs. Before the kill, the events
// of earlier transactions are in Kafka and the slot is confirmed past
// them; Kafka then takes a few thousand more records and holds the rest
// of what the relay sends (kfake's control), so that the relay dies with
// part of a transaction in Kafka and part in its producer. Restarted,
// every event arrives, each aggregate in commit order; the repeats are at
// most the events of the transactions the slot had not been confirmed
// past, each at most once, none of an earlier transaction.
func TestCDCOneCommitManyEventsKilled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after int // records Kafka takes before it holds the rest
		write func(ctx context.Context, t *testing.T, w *eventWriter) []string
	}{
		{"COPY", 5000, func(ctx context.Context, t *testing.T, w *eventWriter) []string {
			return w.copy(ctx, t, 20000)
		}},
		{"MultiRowInsert", 2500, func(ctx context.Context, t *testing.T, w *eventWriter) []string {
			var all []string
			for range 40 {
				all = append(all, w.insert(ctx, t, 250)...)
			}
			return all
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			k := startKilledRelay(t, "")
			w := newEventWriter(k.pool, 20)
			// Earlier transactions, in Kafka and confirmed before the kill.
			for range 100 {
				w.insert(ctx, t, 2)
			}
			k.c.waitFor(t, readRows(ctx, t, k.pool, "outbox"), time.Minute)
			waitConfirmed(ctx, t, k.pool, k.slot, w.log.last())

			hold := holdProduce(t, k.cluster, tc.after)
			big := tc.write(ctx, t, w)
			// And after them, transactions of two events.
			for range 100 {
				w.insert(ctx, t, 2)
			}
			select {
			case <-hold.held:
			case <-time.After(time.Minute):
				t.Fatalf("Kafka never held a produce request after %d records", tc.after)
			}
			// Let the relay fill its producer with what Kafka holds.
			time.Sleep(300 * time.Millisecond)
			confirmed := k.kill(ctx, t)
			k.c.settle(500 * time.Millisecond)
			inKafka := 0
			for _, id := range big {
				if k.c.ids[id] > 0 {
					inKafka++
				}
			}
			if inKafka == 0 || inKafka == len(big) {
				t.Fatalf("%d of the %d events written at once were in Kafka when the relay was killed; the kill must fall in the middle of them", inKafka, len(big))
			}
			hold.free()

			k.restart(t)
			rows := readRows(ctx, t, k.pool, "outbox")
			k.c.waitFor(t, rows, 2*time.Minute)
			k.stop(t)
			k.c.settle(300 * time.Millisecond)
			rep := k.c.check(t, rows, partitions)
			may := w.log.repeatable(confirmed)
			repeats := checkRepeats(t, k.c, may)
			t.Logf("%d events, %d of the %d written at once in Kafka at the kill; the slot confirmed at %s: %d repeated of the %d it may repeat (%d records)",
				len(rows), inKafka, len(big), confirmed, repeats, len(may), rep.records)
		})
	}
}

// messageWriter commits outbox events as transactional logical decoding
// messages of prefix outbox, several to a transaction, and records them:
// rows holds each event as check expects it (the payload as written, as
// the relay publishes it).
type messageWriter struct {
	pool *pgxpool.Pool
	log  txnLog
	seq  map[string]int
	next int

	mu   sync.Mutex
	rows map[string]row
}

func newMessageWriter(pool *pgxpool.Pool) *messageWriter {
	return &messageWriter{pool: pool, seq: map[string]int{}, rows: map[string]row{}}
}

// write commits txns transactions of perTxn messages, one every interval,
// round ten aggregates.
func (w *messageWriter) write(ctx context.Context, txns, perTxn int, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for range txns {
		<-tick.C
		b := &pgx.Batch{}
		written := map[string]row{}
		var txnIDs []string
		for range perTxn {
			agg := aggID(w.next % 10)
			w.next++
			w.seq[agg]++
			id := newEventID()
			payload := fmt.Sprintf(`{"aggregate": %q, "seq": %d}`, agg, w.seq[agg])
			b.Queue(`SELECT pg_logical_emit_message(true, 'outbox', $1)`,
				fmt.Sprintf(`{"id": %q, "aggregatetype": "order", "aggregateid": %q, "type": "Msg", "payload": %s}`, id, agg, payload))
			written[id] = row{id: id, aggType: "order", aggID: agg, payload: payload}
			txnIDs = append(txnIDs, id)
		}
		if err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
			return fmt.Errorf("emit messages: %w", err)
		}
		w.mu.Lock()
		for id, r := range written {
			w.rows[id] = r
		}
		w.mu.Unlock()
		if err := w.log.committed(ctx, w.pool, txnIDs); err != nil {
			return err
		}
	}
	return nil
}

// inBackground runs write while the caller goes on; the channel gets its
// result.
func (w *messageWriter) inBackground(ctx context.Context, txns, perTxn int, interval time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- w.write(ctx, txns, perTxn, interval) }()
	return done
}

// written is every event committed so far.
func (w *messageWriter) written() map[string]row {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]row, len(w.rows))
	for id, r := range w.rows {
		out[id] = r
	}
	return out
}

// TestCDCLogicalMessagesThroughRestarts relays outbox events written as
// transactional logical decoding messages (cdc.message_prefixes), four
// to a transaction, while a writer goes on: through a graceful restart
// (SIGTERM, then a new relay), which repeats none, and then through a
// SIGKILL, which repeats at most the messages of the transactions the
// slot had not been confirmed past, each at most once. Every message
// arrives, each aggregate in commit order.
func TestCDCLogicalMessagesThroughRestarts(t *testing.T) {
	ctx := context.Background()
	k := startKilledRelay(t, "  message_prefixes: [outbox]\n")
	w := newMessageWriter(k.pool)

	written := w.inBackground(ctx, 500, 4, 4*time.Millisecond)
	k.c.readAtLeast(ctx, t, 400, time.Minute)
	k.stop(t)
	k.restart(t)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	k.c.waitFor(t, w.written(), 2*time.Minute)
	k.c.settle(300 * time.Millisecond)
	if rep := k.c.check(t, w.written(), partitions); rep.duplicates != 0 {
		t.Errorf("%d messages repeated after a graceful restart, want 0", rep.duplicates)
	}

	before := len(k.c.recs)
	written = w.inBackground(ctx, 500, 4, 4*time.Millisecond)
	k.c.readAtLeast(ctx, t, before+400, time.Minute)
	confirmed := k.kill(ctx, t)
	k.restart(t)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	rows := w.written()
	k.c.waitFor(t, rows, 2*time.Minute)
	k.stop(t)
	k.c.settle(300 * time.Millisecond)
	rep := k.c.check(t, rows, partitions)
	may := w.log.repeatable(confirmed)
	repeats := checkRepeats(t, k.c, may)
	t.Logf("%d messages (%d records); after the kill, the slot confirmed at %s: %d repeated of the %d it may repeat",
		len(rows), rep.records, confirmed, repeats, len(may))
}

// nonTxnSkipped is the ERROR the relay logs, once a minute, when it skips
// a non-transactional message with an outbox prefix.
const nonTxnSkipped = "skipping a non-transactional logical decoding message with an outbox prefix"

// TestCDCNonTransactionalMessagesSkippedAcrossRestart: a non-transactional
// logical decoding message with an outbox prefix is not an event (it is
// written even when its transaction rolls back): as docs/guarantees.md
// says, the relay skips it, logs the ERROR and counts it in
// outboxrelay_skipped_changes_total. Three come between transactional
// events; the relay is stopped gracefully; two more are written while it
// is down. The relay started next skips those two, and not the first
// three again: the slot was confirmed past them. No skipped message
// reaches Kafka, and every transactional one does, in order.
func TestCDCNonTransactionalMessagesSkippedAcrossRestart(t *testing.T) {
	ctx := context.Background()
	k := startKilledRelay(t, "  message_prefixes: [outbox]\n")
	w := newMessageWriter(k.pool)
	nonTxn := func(n int) {
		t.Helper()
		for range n {
			if _, err := k.pool.Exec(ctx, `SELECT pg_logical_emit_message(false, 'outbox', $1)`,
				fmt.Sprintf(`{"id": %q, "aggregatetype": "order", "aggregateid": "agg-0", "type": "Msg", "payload": {"seq": 1000}}`, newEventID())); err != nil {
				t.Fatal(err)
			}
			if err := w.write(ctx, 1, 2, time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each ends with a transactional message, after which the slot is
	// confirmed.
	skippedBy := func(p *proc, want float64) {
		t.Helper()
		k.c.waitFor(t, w.written(), time.Minute)
		if v, ok := value(binaryEndpoint(t, p).scrape(t), "outboxrelay_skipped_changes_total"); !ok || v != want {
			t.Errorf("outboxrelay_skipped_changes_total = %v (present %v), want %v", v, ok, want)
		}
		if n := strings.Count(p.out.String(), nonTxnSkipped); n != 1 {
			t.Errorf("the relay said %d times %q; want once (once a minute):\n%s", n, nonTxnSkipped, lastLines(p.out.String(), 10))
		}
		if !strings.Contains(p.out.String(), "level=ERROR msg=\""+nonTxnSkipped) || !strings.Contains(p.out.String(), "prefix=outbox") {
			t.Errorf("the skip is not an ERROR naming the prefix:\n%s", lastLines(p.out.String(), 10))
		}
	}
	nonTxn(3)
	skippedBy(k.p, 3)
	k.stop(t)
	nonTxn(2)
	k.restart(t)
	skippedBy(k.p, 2)
	k.stop(t)
	k.c.settle(300 * time.Millisecond)
	if rep := k.c.check(t, w.written(), partitions); rep.duplicates != 0 {
		t.Errorf("%d messages repeated after a graceful restart, want 0", rep.duplicates)
	}
}
