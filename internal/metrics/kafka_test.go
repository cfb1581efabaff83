package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The relay's own produce hook exports what kprom's would: the same
// metric, with the same labels and values, beside kprom's other metrics.
func TestKafkaHooksCountProducedBytesAsKprom(t *testing.T) {
	reg, stock, cl := beside(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 50 {
		topic := []string{"orders", "customers"}[i%2]
		rec := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 100+i)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// franz-go runs the batch hooks, each in turn, apart from the
	// promises ProduceSync waits for: the last batch may be counted by one
	// hook and not yet by the other. Both count it within moments.
	const produced = "outboxrelay_kafka_produce_bytes_total"
	var got, want map[string]*dto.MetricFamily
	var g, w string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, want = families(t, reg), families(t, stock)
		g, w = series(got[produced]), series(want[produced])
		if (g == w && w != "") || time.Now().After(deadline) {
			break
		}
	}
	if g != w || w == "" {
		t.Errorf("%s:\n got %s\nwant %s (kprom's)", produced, g, w)
	}
	for name := range want {
		if got[name] == nil {
			t.Errorf("%s, which kprom exports, is missing", name)
		}
	}
	for name := range got {
		if want[name] == nil && strings.HasPrefix(name, "outboxrelay_kafka_") {
			t.Errorf("%s is exported, which kprom does not export", name)
		}
	}
}

// beside opens a client to a fresh broker with the relay's hooks, on reg,
// and with stock kprom's beside them, made with stockOpts, on stock.
func beside(t *testing.T, stockOpts []kprom.Opt, opts ...kgo.Opt) (reg, stock *prometheus.Registry, cl *kgo.Client) {
	t.Helper()
	_, brokers := testenv.Kafka(t)
	reg, stock = prometheus.NewRegistry(), prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	kp := kprom.NewMetrics(Namespace, append([]kprom.Opt{kprom.Subsystem("kafka"), kprom.Registerer(stock)}, stockOpts...)...)
	cl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.WithHooks(m.KafkaHooks(), kp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return reg, stock, cl
}

func families(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	return byName
}

// series shows a family's help, type, labels and values: what a scrape
// shows of it.
func series(mf *dto.MetricFamily) string {
	if mf == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", mf.GetHelp(), mf.GetType())
	for _, m := range mf.GetMetric() {
		b.WriteString("\n")
		for _, l := range m.GetLabel() {
			fmt.Fprintf(&b, "%s=%s ", l.GetName(), l.GetValue())
		}
		fmt.Fprint(&b, m.GetCounter().GetValue())
	}
	return b.String()
}

// The sink replaces its Kafka client now and then, opening the new one
// before closing the old with the same hooks: kprom's collectors stay
// registered throughout (kprom alone panics on the second client and
// unregisters them when the first closes), and go when the last closes.
func TestKafkaHooksOutliveAClientReplaced(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	open := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.WithHooks(m.KafkaHooks()))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	const connects = Namespace + "_kafka_connects_total"
	registered := func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == connects {
				return true
			}
		}
		return false
	}
	first := open()
	second := open()
	first.Close()
	if !registered() {
		t.Errorf("%s is gone once the replaced client closed", connects)
	}
	second.Close()
	if registered() {
		t.Errorf("%s is still registered after the last client closed", connects)
	}
}

// outboxrelay_produce_batch_records observes every partition batch
// produced: as many observations as kprom's counter of batches would
// count, adding up to its count of records.
func TestKafkaHooksObserveRecordsPerBatch(t *testing.T) {
	reg, stock, cl := beside(t, []kprom.Opt{kprom.FetchAndProduceDetail(kprom.Batches, kprom.Records)}, kgo.ProducerLinger(5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const records = 120
	for i := range records {
		topic := []string{"orders", "customers"}[i%2]
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Value: make([]byte, 100)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	total := func(mf *dto.MetricFamily) (sum float64) {
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	var count uint64
	var sum, batches, recs float64
	// The batch hooks run apart from the promises Flush waits for (see
	// above).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, want := families(t, reg), families(t, stock)
		h := got[Namespace+"_produce_batch_records"].GetMetric()
		if len(h) == 1 {
			count, sum = h[0].GetHistogram().GetSampleCount(), h[0].GetHistogram().GetSampleSum()
		}
		batches, recs = total(want[Namespace+"_kafka_produce_batches_total"]), total(want[Namespace+"_kafka_produce_records_total"])
		if (float64(count) == batches && sum == recs && recs == records) || time.Now().After(deadline) {
			break
		}
	}
	if float64(count) != batches || sum != recs || recs != records {
		t.Errorf("%d batches observed of %v records in all; kprom counted %v batches of %v records, and %d were produced", count, sum, batches, recs, records)
	}
}
