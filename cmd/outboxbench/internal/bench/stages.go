package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outboxrelay/outboxrelay/internal/metrics"
)

// stageMetric is the relay's histogram of what held its slow events
// (internal/metrics): the events 10 ms or more from commit to Kafka's
// acknowledgement, by stage.
const stageMetric = "outboxrelay_slow_event_stage_seconds"

// stageTotals are the stage histogram's counts and sums at one moment.
type stageTotals map[string]struct {
	count uint64
	sum   float64
}

// freeAddr is a loopback address nothing listens on, for a relay's HTTP
// endpoint that the benchmark reads.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// readStages reads the stage histogram from the relay's /metrics at addr.
func readStages(ctx context.Context, addr string) (stageTotals, error) {
	mfs, err := readMetrics(ctx, addr)
	if err != nil {
		return nil, err
	}
	mf, ok := mfs[stageMetric]
	if !ok {
		return nil, nil // a relay from before the metric
	}
	out := stageTotals{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "stage" {
				h := m.GetHistogram()
				out[l.GetValue()] = struct {
					count uint64
					sum   float64
				}{h.GetSampleCount(), h.GetSampleSum()}
			}
		}
	}
	return out, nil
}

// readMetrics reads and parses the relay's /metrics at addr.
func readMetrics(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the relay's metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the relay's metrics: %w", err)
	}
	return mfs, nil
}

// slowStages says what held the slow events between two readings: how
// many there were, and the mean milliseconds each stage held them; -1
// when the relay does not export the metric.
func slowStages(before, after stageTotals) (int, map[string]float64) {
	if after == nil {
		return -1, nil
	}
	var slow uint64
	means := map[string]float64{}
	for stage, a := range after {
		b := before[stage]
		n := a.count - b.count
		if n == 0 {
			continue
		}
		// Every slow event has a relay and a kafka stage.
		if stage == metrics.StageKafka {
			slow = n
		}
		means[stage] = 1000 * (a.sum - b.sum) / float64(n)
	}
	return int(slow), means
}

// formatStages is the table cell for slow events' stages.
func formatStages(slow int, means map[string]float64) string {
	switch {
	case slow < 0:
		return "unknown (this relay does not export " + stageMetric + ")"
	case slow == 0:
		return "none"
	}
	var parts []string
	for _, stage := range []string{metrics.StagePostgres, metrics.StageNetwork, metrics.StageRelay, metrics.StageKafka} {
		if ms, ok := means[stage]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", stage, ms))
		}
	}
	return fmt.Sprintf("%d: %s", slow, strings.Join(parts, ", "))
}
