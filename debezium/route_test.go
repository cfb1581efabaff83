package debezium

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestRoute: what Route makes of one row, option by option, from the
// catalog alone: no PostgreSQL, no Kafka.
func TestRoute(t *testing.T) {
	cols := outboxColumns(
		&column{name: "tenant", typName: "varchar"},
		&column{name: "shard", typName: "int4"},
		&column{name: "created", typName: "int8"},
	)
	commit := time.Unix(0, 0)
	row := func(aggType string, extra ...connector.Column) *connector.Event {
		e := outboxRow(append([]connector.Column{
			{Name: "type", Value: []byte("OrderCreated")},
			{Name: "payload", Value: []byte(`{"a": 1}`)},
		}, extra...)...)
		e.AggregateType = aggType
		return e
	}
	const id = "4d47e190-0402-4048-bc2c-89dd54343cdc"
	for _, tc := range []struct {
		name    string
		cfg     RouterConfig
		event   *connector.Event
		topic   string
		key     string
		value   *string // nil: a tombstone
		headers []string
		part    *int32
		ts      time.Time
		err     string
	}{
		{name: "defaults", event: row("order"),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "topic prefix", cfg: RouterConfig{TopicPrefix: "events."}, event: row("order"),
			topic: "events.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "one topic", cfg: RouterConfig{Topic: "all-events"}, event: row("order"),
			topic: "all-events", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "topic regex", cfg: RouterConfig{TopicRegex: `(ord)(er)`, TopicReplacement: `x.$2.$1`}, event: row("order"),
			topic: "x.er.ord", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "topic regex that does not match keeps the value", cfg: RouterConfig{TopicRegex: `inv(.*)`, TopicReplacement: `x.$1`}, event: row("order"),
			topic: "order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "aggregate type that makes no topic name", event: row("or der"),
			err: `aggregate type "or der"`},
		{name: "type header", cfg: RouterConfig{TypeHeader: "eventType"}, event: row("order"),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id, "eventType=OrderCreated"}, ts: commit},
		{name: "json key and headers", cfg: RouterConfig{KeyFormat: FormatJSON, HeaderFormat: FormatJSON}, event: row("order"),
			topic: "outbox.event.order", key: `"1"`, value: ptr(`{"a": 1}`), headers: []string{`id="` + id + `"`}, ts: commit},
		{name: "string value", cfg: RouterConfig{ValueFormat: FormatString}, event: row("order"),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "header field", cfg: RouterConfig{AdditionalFields: []string{"tenant:header:t"}}, event: row("order", connector.Column{Name: "tenant", Value: []byte("acme")}),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id, "t=acme"}, ts: commit},
		{name: "missing header column", cfg: RouterConfig{AdditionalFields: []string{"tenant:header"}}, event: row("order"),
			err: `the row has no column "tenant" for header "tenant"`},
		{name: "missing header column, optional", cfg: RouterConfig{AdditionalFields: []string{"tenant:header"}, AdditionalFieldsOptional: true}, event: row("order"),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: commit},
		{name: "partition column", cfg: RouterConfig{AdditionalFields: []string{"shard:partition"}}, event: row("order", connector.Column{Name: "shard", Value: []byte("2")}),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, part: ptr(int32(2)), ts: commit},
		{name: "negative partition", cfg: RouterConfig{AdditionalFields: []string{"shard:partition"}}, event: row("order", connector.Column{Name: "shard", Value: []byte("-1")}),
			err: `partition column "shard" holds "-1"`},
		{name: "timestamp column", cfg: RouterConfig{TimestampColumn: "created"}, event: row("order", connector.Column{Name: "created", Value: []byte("1700000000123")}),
			topic: "outbox.event.order", key: "1", value: ptr(`{"a": 1}`), headers: []string{"id=" + id}, ts: time.UnixMilli(1700000000123)},
		{name: "null payload", event: outboxRow(connector.Column{Name: "payload", Null: true}),
			topic: "outbox.event.order", key: "1", value: nil, headers: []string{"id=" + id}, ts: commit},
		{name: "blank payload, tombstone", cfg: RouterConfig{TombstoneOnEmptyPayload: true}, event: outboxRow(connector.Column{Name: "payload", Value: []byte("  ")}),
			topic: "outbox.event.order", key: "1", value: nil, headers: []string{"id=" + id}, ts: commit},
		{name: "blank payload, no tombstone", event: outboxRow(connector.Column{Name: "payload", Value: []byte("  ")}),
			topic: "outbox.event.order", key: "1", value: ptr("  "), headers: []string{"id=" + id}, ts: commit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := fixedRouter(t, tc.cfg, cols...).Route(t.Context(), tc.event)
			if tc.err != "" {
				var ee *connector.EventError
				if !errors.As(err, &ee) || ee.EventID != id || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Route = %v; want an error of event %s saying %q", err, id, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var headers []string
			for _, h := range m.Headers {
				headers = append(headers, h.Key+"="+string(h.Value))
			}
			if m.Topic != tc.topic || string(m.Key) != tc.key || !slices.Equal(headers, tc.headers) || !m.Timestamp.Equal(tc.ts) || m.EventID != id {
				t.Errorf("Route = topic %q key %q headers %q timestamp %s event %q\nwant topic %q key %q headers %q timestamp %s event %q",
					m.Topic, m.Key, headers, m.Timestamp, m.EventID, tc.topic, tc.key, tc.headers, tc.ts, id)
			}
			if (tc.value == nil) != (m.Value == nil) || (tc.value != nil && string(m.Value) != *tc.value) {
				t.Errorf("value %q (nil %t), want %v", m.Value, m.Value == nil, deref(tc.value))
			}
			if (tc.part == nil) != (m.Partition == nil) || (tc.part != nil && *tc.part != *m.Partition) {
				t.Errorf("partition %v, want %v", deref(m.Partition), deref(tc.part))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) any {
	if p == nil {
		return "none"
	}
	return *p
}

// TestRouteProperties checks, over many generated rows and several
// configurations, what must hold of every record: the same row makes the
// same record, from this router and from a new one, and routing leaves
// the row as it was; the key depends on the aggregate id alone, so every
// event of an aggregate hashes (murmur2, as the sink's partitioner and
// Java's do) to one partition, and no partition is chosen otherwise; the
// topic is the prefix and the aggregate type, or an error naming the
// event when that is no topic name.
func TestRouteProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 4))
	word := func(alphabet string) string {
		b := make([]byte, 1+rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	const topicChars = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789._-"
	event := func(aggID string) connector.Event {
		aggType := word(topicChars)
		if rng.IntN(10) == 0 {
			aggType += string(" /é*"[rng.IntN(4)])
		}
		cols := []connector.Column{
			{Name: "id", Value: []byte(word("0123456789abcdef-"))},
			{Name: "aggregatetype", Value: []byte(aggType)},
			{Name: "aggregateid", Value: []byte(aggID)},
			{Name: "type", Value: []byte(word(topicChars))},
		}
		if rng.IntN(5) > 0 {
			cols = append(cols, connector.Column{Name: "payload", Value: []byte(`{"n": "` + word(topicChars) + `"}`)})
		} else {
			cols = append(cols, connector.Column{Name: "payload", Null: true})
		}
		return connector.ColumnMap{}.WithDefaults().NewEvent(cols, time.UnixMilli(rng.Int64N(1<<41)), "test")
	}
	configs := map[string]RouterConfig{
		"raw":         {},
		"prefix":      {TopicPrefix: "events."},
		"type header": {TypeHeader: "eventType", HeaderFormat: FormatSimple},
		"json":        {KeyFormat: FormatJSON, ValueFormat: FormatJSON, HeaderFormat: FormatJSON},
		"json+schema": {KeyFormat: FormatJSONSchema, ValueFormat: FormatJSONSchema},
		"string":      {KeyFormat: FormatString, ValueFormat: FormatString, HeaderFormat: FormatSimple},
	}
	partitioner := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			r := fixedRouter(t, cfg, outboxColumns()...)
			prefix := cmpOr(cfg.TopicPrefix, "outbox.event.")
			keys := map[string][]byte{} // aggregate id -> key
			for range 400 {
				aggID := word("0123456789")
				e := event(aggID)
				before := e
				before.Extra = slices.Clone(e.Extra)
				m, err := r.Route(t.Context(), &e)
				if !reflect.DeepEqual(e, before) {
					t.Fatalf("Route changed the row: %+v, was %+v", e, before)
				}
				if connector.ValidTopic(prefix+e.AggregateType) != nil {
					var ee *connector.EventError
					if !errors.As(err, &ee) || ee.EventID != e.ID || !strings.Contains(err.Error(), e.AggregateType) {
						t.Fatalf("aggregate type %q: Route = %v; want an error of event %s naming it", e.AggregateType, err, e.ID)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%+v: %v", e, err)
				}
				again, err := r.Route(t.Context(), &e)
				fresh, ferr := fixedRouter(t, cfg, outboxColumns()...).Route(t.Context(), &e)
				if err != nil || ferr != nil || !reflect.DeepEqual(m, again) || !reflect.DeepEqual(m, fresh) {
					t.Fatalf("the same row routed three times: %+v, %+v (%v), %+v (%v)", m, again, err, fresh, ferr)
				}
				if m.Topic != prefix+e.AggregateType {
					t.Fatalf("topic %q, want %q", m.Topic, prefix+e.AggregateType)
				}
				if m.Partition != nil {
					t.Fatalf("partition %d chosen without a partition column", *m.Partition)
				}
				if k, seen := keys[aggID]; seen && string(k) != string(m.Key) {
					t.Fatalf("aggregate %s: key %q, then %q", aggID, k, m.Key)
				}
				keys[aggID] = m.Key
				for _, n := range []int{1, 3, 12} {
					want := int(uint32(murmur2(m.Key))&0x7fffffff) % n
					if got := partitioner.Partition(&kgo.Record{Key: m.Key}, n); got != want {
						t.Fatalf("key %q of %d partitions: the sink's partitioner says %d, murmur2 %d", m.Key, n, got, want)
					}
				}
			}
		})
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// murmur2 is Kafka's Utils.murmur2, by which the Java producer partitions
// a keyed record (toPositive(murmur2(key)) % partitions).
func murmur2(b []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// The vectors are Kafka's own (clients UtilsTest.testMurmur2).
func TestMurmur2(t *testing.T) {
	for in, want := range map[string]int32{
		"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107,
	} {
		if got := murmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// fakeCatalog is a catalog of one table whose columns a test changes, and
// which records the reads made of it.
type fakeCatalog struct {
	cols  []*column
	err   error
	reads []context.Context
}

func (f *fakeCatalog) Columns(ctx context.Context, schema, table string) ([]CatalogColumn, error) {
	f.reads = append(f.reads, ctx)
	if f.err != nil {
		return nil, f.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return catalogColumns(f.cols), nil
}

func catalogColumns(cols []*column) []CatalogColumn {
	out := make([]CatalogColumn, len(cols))
	for i, c := range cols {
		out[i] = CatalogColumn{Name: c.name, Type: c.typName, TypeMod: c.typMod, NotNull: c.notNull, Default: c.defaultExpr}
	}
	return out
}

// catalogFunc is a [Catalog] that gives the table a function returns.
type catalogFunc func(ctx context.Context, name string) (*tableMeta, error)

func (f catalogFunc) Columns(ctx context.Context, schema, table string) ([]CatalogColumn, error) {
	t, err := f(ctx, schema+"."+table)
	if err != nil {
		return nil, err
	}
	return catalogColumns(t.columns), nil
}

type ctxKey struct{}

// TestRouteReadsTheCatalogWithTheCallersContext: Route reads the catalog
// once, with the caller's context (bounded), and again only when a row
// has a column the catalog lacked (a column added mid-stream), at most
// once a second; a catalog that cannot be read is no fault of the row,
// and is read again with the next; a table that no longer fits the
// configuration is permanent.
func TestRouteReadsTheCatalogWithTheCallersContext(t *testing.T) {
	cat := &fakeCatalog{cols: outboxColumns()}
	r := fixedRouter(t, RouterConfig{AdditionalFields: []string{"tenant:header"}, AdditionalFieldsOptional: true, HeaderFormat: FormatSimple})
	r.tables.catalog = cat
	ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
	route := func(extra ...connector.Column) (connector.Message, error) {
		return r.Route(ctx, outboxRow(append([]connector.Column{{Name: "payload", Value: []byte("{}")}}, extra...)...))
	}

	if _, err := route(); err != nil {
		t.Fatal(err)
	}
	if _, err := route(); err != nil {
		t.Fatal(err)
	}
	if len(cat.reads) != 1 {
		t.Fatalf("%d catalog reads for two rows of known columns, want 1", len(cat.reads))
	}
	if v := cat.reads[0].Value(ctxKey{}); v != "caller" {
		t.Errorf("the catalog was read with a context that is not the caller's (value %v)", v)
	}
	if _, ok := cat.reads[0].Deadline(); !ok {
		t.Errorf("the catalog read has no deadline")
	}

	// A column added mid-stream: the row that has it makes the router
	// read the catalog again.
	cat.cols = outboxColumns(&column{name: "tenant", typName: "varchar"})
	r.tables.read["public.outbox"].at = time.Now().Add(-2 * time.Second)
	m, err := route(connector.Column{Name: "tenant", Value: []byte("acme")})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := header(m, "tenant"); string(h.Value) != "acme" || len(cat.reads) != 2 {
		t.Fatalf("after the catalog was read again (%d reads): tenant header %q, want acme", len(cat.reads), h.Value)
	}
	// Within a second of that read, a column the catalog lacks, which no
	// option names, does not make it read again.
	if _, err := route(connector.Column{Name: "shard", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if len(cat.reads) != 2 {
		t.Fatalf("%d catalog reads, want 2: a catalog read less than a second ago is not read again", len(cat.reads))
	}

	// A catalog that cannot be read is not the row's fault.
	r.tables.read["public.outbox"].at = time.Now().Add(-2 * time.Second)
	cat.err = errors.New("connection refused")
	_, err = route(connector.Column{Name: "shard", Value: []byte("1")})
	var ee *connector.EventError
	if err == nil || errors.As(err, &ee) || connector.IsPermanent(err) {
		t.Fatalf("Route with an unreadable catalog = %v; want an error that is neither the row's nor permanent", err)
	}

	// A caller that stops ends the read, again not the row's fault.
	cat.err = nil
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	_, err = r.Route(stopped, outboxRow(connector.Column{Name: "shard", Value: []byte("1")}))
	if !errors.Is(err, context.Canceled) || errors.As(err, &ee) {
		t.Fatalf("Route with a cancelled context = %v; want context.Canceled, not the row's", err)
	}

	// The table changed so that it no longer fits: permanent.
	cat.cols = outboxColumns()[:4]
	cat.cols = append(cat.cols, &column{name: "shard", typName: "int4"})
	_, err = route(connector.Column{Name: "shard", Value: []byte("1")})
	if !connector.IsPermanent(err) || !strings.Contains(err.Error(), `no column "payload"`) {
		t.Fatalf("Route on a table without its payload column = %v; want a permanent error naming it", err)
	}
}

// TestRouteAvroEndsWithTheCallersContext: with the Schema Registry down,
// Route asks it again until the caller's context ends, then returns an
// error that is not the row's, so that nothing is dead-lettered for a
// stop.
func TestRouteAvroEndsWithTheCallersContext(t *testing.T) {
	reg := testenv.StartRegistry(t, "", "")
	reg.Stop()
	ctx, cancel := context.WithCancel(t.Context())
	failures := 0
	cfg := RouterConfig{ValueFormat: FormatAvro, Registry: RegistryConfig{URLs: []string{reg.URL}, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}}
	cfg.PostgresURL = "postgres://unused"
	r, err := NewRouter(cfg, WithCatalog(&fakeCatalog{cols: outboxColumns()}), WithRegistryState(func(err error) {
		if err != nil {
			if failures++; failures == 3 {
				cancel()
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Route(ctx, outboxRow(connector.Column{Name: "payload", Value: []byte("{}")}))
	var ee *connector.EventError
	if err == nil || errors.As(err, &ee) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Route while the registry is down and the caller stops = %v; want an error, not the row's, saying the registry is unreachable", err)
	}
	if failures != 3 {
		t.Errorf("%d failures reported, want 3 (the context ended after the third)", failures)
	}
}
