package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
)

// The alert rules and the dashboard in deploy/ query the relay's metrics
// by name and label. TestDeployQueriesMatchMetrics runs the relay with
// each source, relays events (and a dead letter, so that the error series
// exist), scrapes /metrics, and checks that every metric and label those
// queries use is there: a renamed metric fails here, not in a silent alert.

// externalMetrics are queried by the rules but exported by something other
// than the relay.
var externalMetrics = map[string]string{
	"up":                    "Prometheus, for every target it scrapes",
	"kube_pod_status_ready": "kube-state-metrics",
}

// targetLabels are attached by Prometheus from the scrape target, not by
// the relay: job and instance always, the others by Kubernetes service
// discovery and the Prometheus Operator.
var targetLabels = map[string]bool{
	"job": true, "instance": true, "namespace": true, "pod": true,
	"container": true, "service": true, "endpoint": true,
}

// query is one PromQL expression and where it comes from.
type query struct{ from, expr string }

// deployQueries reads every expression of the alert rules and of the
// dashboard's panels.
func deployQueries(t *testing.T) []query {
	t.Helper()
	var queries []query
	data, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries = append(queries, query{"alert " + r.Alert, r.Expr})
		}
	}
	data, err = os.ReadFile("../deploy/grafana/outboxrelay.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("outboxrelay.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, tg.Expr})
		}
	}
	if len(queries) < 10 {
		t.Fatalf("read only %d queries from deploy/", len(queries))
	}
	return queries
}

// promqlUse is what one expression asks of the metrics: the series it
// selects, with the labels its matchers name, and the labels it groups or
// matches by.
type promqlUse struct {
	selectors []promqlSelector
	grouping  []string // by, without, on, ignoring, group_left, group_right
}

type promqlSelector struct {
	metric string
	labels []string
}

// promqlKeywords are identifiers that are not metric names even when no
// '(' follows them, as it follows a function: operators, and aggregations,
// which may be followed by by (...) or without (...) first.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"atan2": true, "inf": true, "nan": true, "Inf": true, "NaN": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
}

var promqlGrouping = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// parsePromQL finds the selectors and grouping labels of expr. It is not a
// PromQL parser (github.com/prometheus/prometheus would bring in most of
// Prometheus for it); it knows the lexical structure, which is all this
// needs: an identifier followed by '(' is a function or aggregation, one
// after by/on/... is a label, one before '{' or standing alone is a metric
// name, and strings, ranges ([5m], [$__rate_interval]) and numbers are
// skipped. It errs on anything it does not understand.
func parsePromQL(expr string) (promqlUse, error) {
	var u promqlUse
	rs := []rune(expr)
	i := 0
	isIdentStart := func(r rune) bool { return r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
	isIdent := func(r rune) bool { return isIdentStart(r) || r >= '0' && r <= '9' }
	skipSpace := func() {
		for i < len(rs) && strings.ContainsRune(" \t\r\n", rs[i]) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(rs) && isIdent(rs[i]) {
			i++
		}
		return string(rs[start:i])
	}
	skipString := func() error {
		q := rs[i]
		for i++; i < len(rs); i++ {
			if rs[i] == '\\' && q != '`' {
				i++
			} else if rs[i] == q {
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	for i < len(rs) {
		r := rs[i]
		switch {
		case strings.ContainsRune(" \t\r\n", r):
			i++
		case r == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case r == '"' || r == '\'' || r == '`':
			if err := skipString(); err != nil {
				return u, err
			}
		case r == '[':
			for i < len(rs) && rs[i] != ']' {
				i++
			}
			i++
		case r >= '0' && r <= '9' || r == '.':
			for i < len(rs) && (isIdent(rs[i]) || rs[i] == '.') {
				i++
			}
		case r == '{':
			return u, fmt.Errorf("a selector without a metric name in %q", expr)
		case isIdentStart(r):
			name := ident()
			skipSpace()
			next := rune(0)
			if i < len(rs) {
				next = rs[i]
			}
			switch {
			case promqlGrouping[name] && next == '(':
				i++
				for {
					skipSpace()
					if i >= len(rs) {
						return u, fmt.Errorf("unterminated %s ( in %q", name, expr)
					}
					if rs[i] == ')' {
						i++
						break
					}
					if rs[i] == ',' {
						i++
						continue
					}
					l := ident()
					if l == "" {
						return u, fmt.Errorf("unexpected %q in %s (...) of %q", rs[i], name, expr)
					}
					u.grouping = append(u.grouping, l)
				}
			case promqlGrouping[name] || promqlKeywords[name] || next == '(':
				// A keyword, or a function or aggregation: its arguments
				// are read as the loop goes on.
			default:
				sel := promqlSelector{metric: name}
				if next == '{' {
					i++
					for {
						skipSpace()
						if i >= len(rs) {
							return u, fmt.Errorf("unterminated { in %q", expr)
						}
						if rs[i] == '}' {
							i++
							break
						}
						if rs[i] == ',' {
							i++
							continue
						}
						l := ident()
						if l == "" {
							return u, fmt.Errorf("unexpected %q in the matchers of %s in %q", rs[i], name, expr)
						}
						sel.labels = append(sel.labels, l)
						skipSpace()
						for i < len(rs) && strings.ContainsRune("=!~", rs[i]) {
							i++
						}
						skipSpace()
						if i >= len(rs) || !strings.ContainsRune("\"'`", rs[i]) {
							return u, fmt.Errorf("matcher %s of %s has no string value in %q", l, name, expr)
						}
						if err := skipString(); err != nil {
							return u, err
						}
					}
				}
				u.selectors = append(u.selectors, sel)
			}
		default:
			i++ // operators, parentheses, commas
		}
	}
	return u, nil
}

func TestParsePromQL(t *testing.T) {
	for _, tc := range []struct {
		expr      string
		selectors []promqlSelector
		grouping  []string
	}{
		{`up{job="outboxrelay"} == 0 or absent(up{job="outboxrelay"})`,
			[]promqlSelector{{"up", []string{"job"}}, {"up", []string{"job"}}}, nil},
		{`max by (slot) (outboxrelay_replication_slot_active) == 0`,
			[]promqlSelector{{"outboxrelay_replication_slot_active", nil}}, []string{"slot"}},
		{"(a_total and on (job, instance) b == 1)\nunless on(job,instance) c",
			[]promqlSelector{{"a_total", nil}, {"b", nil}, {"c", nil}}, []string{"job", "instance", "job", "instance"}},
		{`histogram_quantile(0.99, sum by (le) (rate(x_bucket{job=~"$job", instance=~"$instance"}[$__rate_interval])))`,
			[]promqlSelector{{"x_bucket", []string{"job", "instance"}}}, []string{"le"}},
		{`x > 1e9 and deriv(x[15m]) > 0 offset 5m`,
			[]promqlSelector{{"x", nil}, {"x", nil}}, nil},
		{`kube_pod_status_ready{condition="true", pod=~"outboxrelay-.*"} == 0`,
			[]promqlSelector{{"kube_pod_status_ready", []string{"condition", "pod"}}}, nil},
	} {
		u, err := parsePromQL(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if fmt.Sprint(u.selectors) != fmt.Sprint(tc.selectors) || !slices.Equal(u.grouping, tc.grouping) {
			t.Errorf("%q:\n got %v %v\nwant %v %v", tc.expr, u.selectors, u.grouping, tc.selectors, tc.grouping)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `x{job="a"`, `sum by (job`, `x{job}`} {
		if _, err := parsePromQL(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// exported is what a running relay's /metrics holds: for each metric
// name, including a histogram's _bucket, _sum and _count series, the label
// names its samples carry.
type exported map[string]map[string]bool

func (e exported) add(mfs map[string]*dto.MetricFamily) {
	put := func(name string, labels []*dto.LabelPair, extra ...string) {
		if e[name] == nil {
			e[name] = map[string]bool{}
		}
		for _, l := range labels {
			e[name][l.GetName()] = true
		}
		for _, l := range extra {
			e[name][l] = true
		}
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				put(name+"_bucket", m.GetLabel(), "le")
				put(name+"_sum", m.GetLabel())
				put(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				put(name, m.GetLabel(), "quantile")
				put(name+"_sum", m.GetLabel())
				put(name+"_count", m.GetLabel())
			default:
				put(name, m.GetLabel())
			}
		}
	}
}

// TestDeployQueriesMatchMetrics is described at the top of this file.
func TestDeployQueriesMatchMetrics(t *testing.T) {
	queries := deployQueries(t)
	got := exported{}
	t.Run("cdc", func(t *testing.T) { got.add(scrapeRelaying(t, "cdc")) })
	t.Run("poll", func(t *testing.T) { got.add(scrapeRelaying(t, "poll")) })
	// Format avro adds the Schema Registry's metrics.
	t.Run("cdc-avro", func(t *testing.T) { got.add(scrapeRelaying(t, "cdc-avro")) })
	if t.Failed() {
		return
	}

	for _, q := range queries {
		u, err := parsePromQL(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.from, err)
			continue
		}
		// The labels some series of this expression carries.
		known := maps.Clone(targetLabels)
		for _, s := range u.selectors {
			if _, ok := externalMetrics[s.metric]; ok {
				continue
			}
			labels, ok := got[s.metric]
			if !ok {
				t.Errorf("%s queries %s, which the relay does not export (cdc, poll or cdc with format avro)", q.from, s.metric)
				continue
			}
			maps.Copy(known, labels)
			for _, l := range s.labels {
				if !labels[l] && !targetLabels[l] {
					t.Errorf("%s selects %s by label %q, which it does not have (it has %v)", q.from, s.metric, l, slices.Sorted(maps.Keys(labels)))
				}
			}
		}
		for _, s := range u.selectors {
			if _, ok := externalMetrics[s.metric]; ok {
				for _, l := range s.labels {
					known[l] = true // the external exporter's labels are its own business
				}
			}
		}
		for _, l := range u.grouping {
			if !known[l] {
				t.Errorf("%s groups or matches by %q, which none of its series has", q.from, l)
			}
		}
	}
}

// scrapeRelaying runs the relay with source, relays a few events and one
// that is too large (so that it is refused, counted as a publish error and
// dead-lettered), and returns what /metrics then says.
func scrapeRelaying(t *testing.T, source string) map[string]*dto.MetricFamily {
	ctx := context.Background()
	dbURL := testenv.Postgres(t)
	pool := connectPool(t, dbURL)
	const table = "outbox"
	createOutbox(t, pool, table)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	env := map[string]string{
		"postgres.url":            dbURL,
		"outbox.table":            "public." + table,
		"source":                  source,
		"kafka.brokers":           strings.Join(brokers, ","),
		"kafka.max_record_bytes":  "2000",
		"kafka.dead_letter_topic": "outbox.dead-letter",
		"http.listen":             "127.0.0.1:0",
	}
	switch source {
	case "cdc-avro":
		env["source"] = "cdc"
		env["routing.value_format"] = "avro"
		env["schema_registry.url"] = testenv.StartRegistry(t, "", "").URL
		fallthrough
	case "cdc":
		env["cdc.slot"], env["cdc.publication"], env["cdc.status_interval"] = name, name, "100ms"
	case "poll":
		applyPollDDL(t, poller.Config{URL: dbURL, Table: "public." + table})
		env["poll.interval"] = "50ms"
	}
	a := startApp(t, env)
	// The slot captures only what commits after it exists: write once the
	// relay is ready.
	a.waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	const events = 20
	workload{table: table, writers: 2, aggregates: 4, events: events}.write(ctx, t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'big', 'TooLarge', jsonb_build_object('pad', repeat('x', 5000)))`); err != nil {
		t.Fatal(err)
	}

	// Every event counted, the large one as an error and a dead letter.
	var mfs map[string]*dto.MetricFamily
	deadline := time.Now().Add(time.Minute)
	for {
		mfs = a.scrape(t)
		published, _ := value(mfs, "outboxrelay_events_published_total", "topic", "outbox.event.order")
		dead, _ := value(mfs, "outboxrelay_dead_lettered_events_total")
		errs, _ := value(mfs, "outboxrelay_publish_errors_total", "topic", "outbox.event.order")
		if published == events && dead == 1 && errs >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %v of %d events published, %v dead-lettered (want 1), %v publish errors (want at least 1)", published, events, dead, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.stop(t)
	return mfs
}
