package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// outboxDDL is the Debezium-style outbox table, with its name filled in.
const outboxDDL = `CREATE TABLE %s (
	id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	aggregatetype varchar(255) NOT NULL,
	aggregateid   varchar(255) NOT NULL,
	type          varchar(255) NOT NULL,
	payload       jsonb
)`

func createOutbox(t testing.TB, pool *pgxpool.Pool, table string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(outboxDDL, tableIdent(table))); err != nil {
		t.Fatalf("create outbox table: %v", err)
	}
}

func connectPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// workload describes events written by concurrent writers. Each aggregate
// belongs to one writer, which numbers its events 1, 2, ... in the payload,
// so that numbering is the aggregate's commit order.
type workload struct {
	table      string
	aggType    string // aggregatetype of every event; default "order"
	writers    int
	aggregates int
	events     int // in total
	txnSize    int // events per transaction; default 1
	// seqBase is where each aggregate's numbering starts, for a workload
	// that continues an earlier one; the events must then be spread evenly.
	seqBase int
}

func aggID(i int) string { return "agg-" + strconv.Itoa(i) }

// write runs the workload and returns how many events were committed.
func (w workload) write(ctx context.Context, t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if w.aggType == "" {
		w.aggType = "order"
	}
	if w.txnSize == 0 {
		w.txnSize = 1
	}
	var wg sync.WaitGroup
	errs := make(chan error, w.writers)
	for wr := range w.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var aggs []int
			for a := wr; a < w.aggregates; a += w.writers {
				aggs = append(aggs, a)
			}
			seq := make(map[int]int)
			for _, a := range aggs {
				seq[a] = w.seqBase
			}
			n := w.events / w.writers
			if wr < w.events%w.writers {
				n++
			}
			for done := 0; done < n; {
				k := min(w.txnSize, n-done)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					b := &pgx.Batch{}
					for i := range k {
						a := aggs[(done+i)%len(aggs)]
						seq[a]++
						b.Queue(fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Happened', $3)`, tableIdent(w.table)),
							w.aggType, aggID(a), fmt.Sprintf(`{"aggregate": %q, "seq": %d, "pad": "%s"}`, aggID(a), seq[a], pad))
					}
					return tx.SendBatch(ctx, b).Close()
				})
				if err != nil {
					// The transaction rolled back: take its numbers back.
					for i := range k {
						seq[aggs[(done+i)%len(aggs)]]--
					}
					errs <- fmt.Errorf("writer %d: %w", wr, err)
					return
				}
				done += k
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// writeInBackground runs the workload while the caller goes on; the channel
// closes when every event is committed.
func (w workload) writeInBackground(ctx context.Context, t testing.TB, pool *pgxpool.Pool) <-chan struct{} {
	written := make(chan struct{})
	go func() {
		defer close(written)
		w.write(ctx, t, pool)
	}()
	return written
}

const pad = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// row is an outbox row as the database has it.
type row struct {
	id, aggType, aggID, payload string
}

// readRows reads the rows of the outbox table, and of the more tables
// given, by id.
func readRows(ctx context.Context, t testing.TB, pool *pgxpool.Pool, table string, more ...string) map[string]row {
	t.Helper()
	out := map[string]row{}
	for _, table := range append([]string{table}, more...) {
		rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT id::text, aggregatetype, aggregateid, payload::text FROM %s`, tableIdent(table)))
		if err != nil {
			t.Fatalf("read outbox %s: %v", table, err)
		}
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.aggType, &r.aggID, &r.payload); err != nil {
				t.Fatalf("scan outbox %s: %v", table, err)
			}
			out[r.id] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("read outbox %s: %v", table, err)
		}
	}
	return out
}

// collector reads topics from the start and remembers every record.
type collector struct {
	cl   *kgo.Client
	mu   sync.Mutex
	recs []*kgo.Record
	ids  map[string]int // id header -> times seen
	// offsets are the records read, so that a consumer re-reading an
	// offset (after an offset reset, say) is not taken for a relay
	// publishing an event twice, which gives it a new offset.
	offsets map[string]bool
	// orderKnownBroken makes check log, not fail, events out of commit
	// order: for faults under which the relay does not promise order yet
	// (see testBrokerErrors).
	orderKnownBroken bool
	// prefix is the topic prefix check expects (routing.topic_prefix);
	// empty for the default, outbox.event.
	prefix string
}

func newCollector(t testing.TB, brokers []string, topics ...string) *collector {
	t.Helper()
	cl, err := kgo.NewClient(append(testenv.KafkaClientOpts(brokers), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	t.Cleanup(cl.Close)
	return &collector{cl: cl, ids: map[string]int{}, offsets: map[string]bool{}}
}

// add keeps r unless its offset was read before.
func (c *collector) add(r *kgo.Record) {
	at := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
	if c.offsets[at] {
		return
	}
	c.offsets[at] = true
	c.recs = append(c.recs, r)
	c.ids[header(r, "id")]++
}

// poll reads what is there now.
func (c *collector) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	c.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
		c.add(r)
	})
}

// readAtLeast reads until n records have arrived, failing the test if they
// do not within timeout.
func (c *collector) readAtLeast(ctx context.Context, t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(c.recs) < n && time.Now().Before(deadline) {
		c.poll(ctx)
	}
	if len(c.recs) < n {
		t.Fatalf("only %d of %d records within %s", len(c.recs), n, timeout)
	}
}

// waitFor reads until every id in want has been seen, or fails the test
// after timeout naming how many are missing.
func (c *collector) waitFor(t testing.TB, want map[string]row, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		missing := 0
		for id := range want {
			if c.ids[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("after %s, %d of %d events have not reached Kafka (%d records read); missing, by aggregate: %s",
				timeout, missing, len(want), len(c.recs), c.missing(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			c.add(r)
		})
	}
}

// missing says which events of want have not been read, as ranges of each
// aggregate's sequence numbers, so that a failure tells a stall (the tail
// of every aggregate missing) from a gap (a stretch in the middle).
func (c *collector) missing(want map[string]row) string {
	seqs := map[string][]int{}
	for id, r := range want {
		if c.ids[id] == 0 {
			var p struct {
				Seq int `json:"seq"`
			}
			_ = json.Unmarshal([]byte(r.payload), &p)
			seqs[r.aggID] = append(seqs[r.aggID], p.Seq)
		}
	}
	var b strings.Builder
	for i, agg := range slices.Sorted(maps.Keys(seqs)) {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more aggregates", len(seqs)-i)
			break
		}
		s := seqs[agg]
		slices.Sort(s)
		fmt.Fprintf(&b, " %s:", agg)
		for j := 0; j < len(s); {
			k := j
			for k+1 < len(s) && s[k+1] == s[k]+1 {
				k++
			}
			if k == j {
				fmt.Fprintf(&b, " %d", s[j])
			} else {
				fmt.Fprintf(&b, " %d-%d", s[j], s[k])
			}
			j = k + 1
		}
	}
	return b.String()
}

// settle reads for a short while more, to catch duplicates or strays that
// arrive after the last expected record.
func (c *collector) settle(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		c.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			c.add(r)
		})
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// report is what check found.
type report struct {
	records, duplicates int
}

// check verifies every record against the rows: nothing lost, nothing
// foreign, topic, key, value, partition and header as routed, and each
// aggregate's events in commit order once repeats are dropped by id, as a
// consumer would.
func (c *collector) check(t testing.TB, rows map[string]row, partitions int) report {
	t.Helper()
	seen := map[string]bool{}
	lastSeq := map[string]int{}
	rep := report{records: len(c.recs)}
	prefix := cmp.Or(c.prefix, "outbox.event.")
	for _, r := range c.recs {
		id := header(r, "id")
		want, ok := rows[id]
		if !ok {
			t.Errorf("record at %s/%d@%d has id %q, which is no outbox row", r.Topic, r.Partition, r.Offset, id)
			continue
		}
		if seen[id] {
			rep.duplicates++
			continue
		}
		seen[id] = true
		if r.Topic != prefix+want.aggType {
			t.Errorf("event %s: topic %q, want %q", id, r.Topic, prefix+want.aggType)
		}
		if string(r.Key) != want.aggID {
			t.Errorf("event %s: key %q, want %q", id, r.Key, want.aggID)
		}
		if string(r.Value) != want.payload {
			t.Errorf("event %s: value %q, want %q", id, r.Value, want.payload)
		}
		if p := javaPartition(r.Key, partitions); r.Partition != p {
			t.Errorf("event %s: partition %d, the Java client's choice is %d", id, r.Partition, p)
		}
		seq := payloadSeq(t, want.payload)
		if prev := lastSeq[want.aggType+"/"+want.aggID]; seq != prev+1 {
			report := t.Errorf
			if c.orderKnownBroken {
				report = t.Logf
			}
			report("aggregate %s: event %d follows event %d (out of commit order or missing)", want.aggID, seq, prev)
		}
		lastSeq[want.aggType+"/"+want.aggID] = seq
	}
	for _, id := range slices.Sorted(maps.Keys(rows)) {
		if !seen[id] {
			t.Errorf("event %s (aggregate %s) was committed and never reached Kafka", id, rows[id].aggID)
		}
	}
	return rep
}

func payloadSeq(t testing.TB, payload string) int {
	var p struct {
		Seq int `json:"seq"`
	}
	if err := json.Unmarshal([]byte(payload), &p); err != nil || p.Seq == 0 {
		t.Fatalf("cannot read seq from payload %s: %v", payload, err)
	}
	return p.Seq
}

// javaPartition is the Java client's default partition for a keyed record:
// murmur2 of the key, made positive, modulo the partition count. Written
// here from the Java source, independently of franz-go's partitioner.
func javaPartition(key []byte, partitions int) int32 {
	return int32((murmur2(key) & 0x7fffffff) % int32(partitions))
}

func murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// tableIdent quotes a table name for SQL: "outbox", or "schema.table" for
// a table in another schema.
func tableIdent(name string) string {
	if schema, table, ok := strings.Cut(name, "."); ok {
		return pgx.Identifier{schema, table}.Sanitize()
	}
	return pgx.Identifier{name}.Sanitize()
}
