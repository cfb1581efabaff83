package metrics

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDocsListMetrics keeps the metrics table of docs/operations.md and
// the metrics the relay registers the same set.
func TestDocsListMetrics(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(outboxrelay_[a-z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}

	reg := prometheus.NewRegistry()
	m, err := New(reg, WithBuildInfo("test"))
	if err != nil {
		t.Fatal(err)
	}
	probe, err := NewPostgresProbe("postgres://127.0.0.1:1/none", "slot")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	sreg, err := NewSchemaRegistry(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc, 100)
	for _, c := range []prometheus.Collector{sreg.up, sreg.errors} {
		c.Describe(descs)
	}
	for _, c := range []prometheus.Collector{m.published, m.publishErrors, m.latency, m.stages, m.batchEvents, m.deadLettered, m.restarts, relayCollector{m}, probe, m.kafka.batchRecords} {
		c.Describe(descs)
	}
	descs <- prometheus.NewDesc("outboxrelay_build_info", "", nil, nil)
	close(descs)
	registered := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		registered[name.FindStringSubmatch(d.String())[1]] = true
	}

	for _, n := range slices.Sorted(maps.Keys(registered)) {
		if !documented[n] {
			t.Errorf("metric %s is not in the metrics table of docs/operations.md", n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(documented)) {
		if !registered[n] && !strings.HasPrefix(n, "outboxrelay_kafka_") {
			t.Errorf("docs/operations.md lists %s, which the relay does not export", n)
		}
	}
}
