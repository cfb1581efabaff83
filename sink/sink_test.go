package sink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRecordLimitIsTheBrokers produces records right at and one byte past
// the broker's message.max.bytes: Message.Size must agree with the broker to
// the byte, so the sink refuses exactly what the broker would.
func TestRecordLimitIsTheBrokers(t *testing.T) {
	const limit = 2000
	_, brokers := testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2000"}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	msg := func(extra int) *connector.Message {
		m := &connector.Message{Topic: "sized", Key: []byte("key"), EventID: "ev", Headers: []connector.Header{{Key: "id", Value: []byte("ev")}}}
		// Varint lengths grow with the value, so search for the exact size.
		for n := range limit {
			v := []byte(strings.Repeat("v", n))
			if m.Value = v; m.Size() == limit+extra {
				return m
			}
		}
		t.Fatalf("no value length gives a record of %d bytes", limit+extra)
		return nil
	}

	s, err := sink.New(sink.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acked := make(chan error, 1)
	// franz-go sizes its very first produce request before it knows the
	// broker's produce version, conservatively; a record within a few
	// bytes of the limit is refused only then. Warm the client first.
	warm := &connector.Message{Topic: "sized", Key: []byte("key"), Value: []byte("warm"), EventID: "warm"}
	if err := s.Publish(ctx, warm, func(err error) { acked <- err }); err != nil || <-acked != nil {
		t.Fatalf("warm-up record: %v", err)
	}
	if err := s.Publish(ctx, msg(0), func(err error) { acked <- err }); err != nil {
		t.Fatalf("a record of exactly the limit was refused: %v", err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("the broker refused a record of exactly the limit: %v", err)
	}
	err = s.Publish(ctx, msg(1), func(error) { t.Error("done called for a refused record") })
	var ee *connector.EventError
	var tl *connector.RecordTooLargeError
	if !errors.As(err, &ee) || ee.EventID != "ev" || !errors.As(err, &tl) || tl.Size != limit+1 || tl.Limit != limit {
		t.Fatalf("one byte over: err %v; want a RecordTooLargeError of %d > %d naming the event", err, limit+1, limit)
	}

	// The broker agrees: the same record produced without the check fails.
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := msg(1)
	res := raw.ProduceSync(ctx, &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("ev")}}})
	if res.FirstErr() == nil {
		t.Fatal("the broker accepted a record one byte over its limit; Message.Size overcounts")
	}
}

// TestPartitionerIsJavas checks the sink's partitions for known keys
// against the Java client's murmur2 choice (partition counts from Kafka's
// own DefaultPartitioner behaviour: toPositive(murmur2(key)) % n).
func TestPartitionerIsJavas(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.SeedTopics(12, "parts"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sink.New(sink.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// murmur2 values from Kafka's UtilsTest; partition = (h & 0x7fffffff) % 12.
	want := map[string]int32{
		"21":     int32((-973932308 & 0x7fffffff) % 12),
		"foobar": int32((-790332482 & 0x7fffffff) % 12),
		"abc":    int32((479470107 & 0x7fffffff) % 12),
	}
	for key := range want {
		if err := s.Publish(ctx, &connector.Message{Topic: "parts", Key: []byte(key), Value: []byte("v"), EventID: key}, func(err error) {
			if err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range testenv.Consume(ctx, t, brokers, []string{"parts"}, len(want)) {
		if p := want[string(r.Key)]; r.Partition != p {
			t.Errorf("key %q on partition %d, the Java client picks %d", r.Key, r.Partition, p)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  sink.Config
		want []string
	}{
		{name: "empty", cfg: sink.Config{}, want: []string{"at least one broker"}},
		{name: "everything wrong at once", cfg: sink.Config{Brokers: []string{"nohost"}, Compression: "brotli", MaxBufferedRecords: -1},
			want: []string{`"nohost" has no port`, `"brotli" is not one of`, "max_buffered_records: -1"}},
		{name: "record larger than buffer", cfg: sink.Config{Brokers: []string{"k:9092"}, MaxRecordBytes: 10 << 20, MaxBufferedBytes: 1 << 20},
			want: []string{"could never be buffered"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sink.New(tc.cfg)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v; want it to say %q", err, w)
				}
			}
		})
	}
}

// TestBatchesFitTheBrokersLimit publishes many small records against a
// small limit: franz-go must cut its batches at the broker's limit, or the
// broker refuses whole batches of perfectly good records.
func TestBatchesFitTheBrokersLimit(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sink.New(sink.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3000
	errs := make(chan error, n)
	for i := range n {
		m := &connector.Message{Topic: "small", Key: []byte{byte(i % 3)}, Value: []byte(strings.Repeat("v", 90)), EventID: "e"}
		if err := s.Publish(ctx, m, func(err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a small record failed: %v", err)
		}
	}
}
