package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const dashboardFile = "grafana/outboxrelay.json"

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

// TestDashboard checks the dashboard's shape (what Grafana would import,
// each panel on the chosen data source and with a description) and that
// it shows what an operator needs; integration/deploy_test.go checks that
// the metrics it queries exist.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard has no uid or title")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable: the dashboard would be tied to one Prometheus")
	}
	ids := map[int]bool{}
	var exprs bytes.Buffer
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v is outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Description == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q uses data source %q, not ${datasource}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" || q.RefID == "" {
				t.Errorf("panel %q has a query without expr or refId", p.Title)
			}
			if q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query uses data source %q, not ${datasource}", p.Title, q.Datasource.UID)
			}
			if !strings.Contains(q.Expr, `job=~"$job"`) {
				t.Errorf("panel %q: query %q ignores the job variable", p.Title, q.Expr)
			}
			exprs.WriteString(q.Expr + "\n")
		}
	}
	// What the dashboard is for: each of these must be on it.
	for what, metric := range map[string]string{
		"events/s per topic":      "outboxrelay_events_published_total",
		"commit-to-Kafka latency": "outboxrelay_event_latency_seconds_bucket",
		"unpublished events":      "outboxrelay_unpublished_events",
		"oldest unpublished age":  "outboxrelay_oldest_unpublished_event_age_seconds",
		"slot lag":                "outboxrelay_replication_slot_lag_bytes",
		"in flight":               "outboxrelay_events_in_flight",
		"publish errors":          "outboxrelay_publish_errors_total",
		"dead letters":            "outboxrelay_dead_lettered_events_total",
		"restarts":                "outboxrelay_source_restarts_total",
		"active (slot streaming)": "outboxrelay_replication_slot_active",
		"active (source running)": "outboxrelay_source_up",
		"slot lost, by cause":     "outboxrelay_replication_slot_losses_total",
		"stopped on a lost slot":  "outboxrelay_replication_slot_lost",
		"slot WAL headroom":       "outboxrelay_replication_slot_safe_wal_size_bytes",
	} {
		if !strings.Contains(exprs.String(), metric+"{") {
			t.Errorf("the dashboard does not show %s (%s)", what, metric)
		}
	}
}
