package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// backlogTimeout bounds the source's backlog query on a scrape.
const backlogTimeout = 2 * time.Second

var (
	inFlightDesc = prometheus.NewDesc(Namespace+"_events_in_flight",
		"Events handed to the Kafka client and not yet acknowledged.", nil, nil)
	oldestDesc = prometheus.NewDesc(Namespace+"_oldest_unpublished_event_age_seconds",
		"Age of the oldest event not yet acknowledged by Kafka (in flight, or for the poller still in the table), from its record timestamp (by default its commit); while the cdc source is down, at least how long the replication slot has stood still holding WAL back; 0 when there is none.", nil, nil)
	backlogDesc = prometheus.NewDesc(Namespace+"_unpublished_events",
		"Outbox rows not yet published, per outbox table (poller only).", []string{"table"}, nil)
	sourceUpDesc = prometheus.NewDesc(Namespace+"_source_up",
		"1 while the source is connected (cdc: streams from its slot; poll: claims); 0 while it connects, reconnects, waits for the slot, or waits to be restarted after an error.", nil, nil)
	activeDesc = prometheus.NewDesc(Namespace+"_active",
		"1 on the instance that reads (cdc: streams from the slot; poll: claims), 0 on a standby or while it connects; with several replicas of one CDC relay, their sum is 1 while one is active.", nil, nil)
	standbyDesc = prometheus.NewDesc(Namespace+"_standby",
		"1 while the relay waits, as a standby, for another session to let go of the replication slot (cdc only).", nil, nil)
	skippedDesc = prometheus.NewDesc(Namespace+"_skipped_changes_total",
		"Changes of the outbox table that are not events (UPDATE, DELETE, TRUNCATE), and non-transactional logical decoding messages of a cdc.message_prefixes prefix, skipped (cdc only).", nil, nil)
	cleanedDesc = prometheus.NewDesc(Namespace+"_cdc_cleanup_deleted_rows_total",
		"Outbox rows cdc.cleanup deleted, their events proven in Kafka (cdc only).", nil, nil)
	cleanupErrDesc = prometheus.NewDesc(Namespace+"_cdc_cleanup_errors_total",
		"cdc.cleanup rounds that failed (no DELETE grant, a lost connection); the table keeps its rows meanwhile (cdc only).", nil, nil)
	slotLossesDesc = prometheus.NewDesc(Namespace+"_replication_slot_losses_total", slotLossesHelp, []string{"cause"}, nil)
	slotLostDesc   = prometheus.NewDesc(Namespace+"_replication_slot_lost", slotLostHelp, []string{"cause"}, nil)
	confirmedDesc  = prometheus.NewDesc(Namespace+"_cdc_confirmed_lsn",
		"The LSN up to which Kafka has acknowledged everything and a checkpoint holds it, as a number; the relay confirms it to the replication slot (cdc only).", nil, nil)
	backlogErrDesc = prometheus.NewDesc(Namespace+"_backlog_query_errors",
		"1 when the last scrape could not count the unpublished rows (poller only).", nil, nil)
)

const (
	slotLossesHelp = "Replication slots that could not carry on from the relay's checkpoint, by cause (dropped, invalidated, ahead, another cluster, server behind, restored): events committed in between may be missing (cdc.on_slot_loss)."
	slotLostHelp   = "1 when a lost replication slot stopped the relay (cdc.on_slot_loss fail), with its cause: events may be missing, and it relays nothing until someone acts (docs/guarantees.md#a-lost-replication-slot); 0, with no cause, otherwise."
)

// relayCollector exports the numbers read at scrape time: the in-flight
// set and what the source knows.
type relayCollector struct{ m *Metrics }

func (c relayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{inFlightDesc, oldestDesc, backlogDesc, sourceUpDesc, activeDesc, standbyDesc, skippedDesc, cleanedDesc, cleanupErrDesc, slotLossesDesc, slotLostDesc, confirmedDesc, backlogErrDesc} {
		ch <- d
	}
}

func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.mu.Lock()
	inFlight, stats := m.inflight.n, m.stats
	m.observeLocked()
	running, standby := m.upLocked()
	m.mu.Unlock()
	now := m.now()

	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(inFlight))
	up := 0.0
	if running {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(sourceUpDesc, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, up)
	waiting := 0.0
	if standby {
		waiting = 1
	}
	ch <- prometheus.MustNewConstMetric(standbyDesc, prometheus.GaugeValue, waiting)

	oldest, backlogs, err := m.oldestUnpublished(context.Background())
	if stats.backlog != nil {
		failed := 0.0
		if err != nil {
			failed = 1
		}
		for _, b := range backlogs {
			ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(b.Events), b.Table)
		}
		ch <- prometheus.MustNewConstMetric(backlogErrDesc, prometheus.GaugeValue, failed)
	}
	age := 0.0
	if !oldest.IsZero() {
		age = max(now.Sub(oldest), 0).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)

	if stats.cleaner != nil {
		ch <- prometheus.MustNewConstMetric(cleanedDesc, prometheus.CounterValue, float64(stats.cleaner.CleanedRows()))
		ch <- prometheus.MustNewConstMetric(cleanupErrDesc, prometheus.CounterValue, float64(stats.cleaner.CleanupErrors()))
	}
	if stats.skips != nil {
		ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.CounterValue, float64(stats.skips.SkippedChanges()))
	}
	if stats.slotLosses != nil {
		lost, cause := 0.0, ""
		if causer, ok := stats.slotLosses.(SlotLossCauser); ok {
			for c, n := range causer.SlotLossesByCause() {
				ch <- prometheus.MustNewConstMetric(slotLossesDesc, prometheus.CounterValue, float64(n), c)
			}
			cause = causer.SlotLostCause()
		} else {
			ch <- prometheus.MustNewConstMetric(slotLossesDesc, prometheus.CounterValue, float64(stats.slotLosses.SlotLosses()), "")
		}
		if stats.slotLosses.SlotLost() {
			lost = 1
		} else {
			cause = ""
		}
		ch <- prometheus.MustNewConstMetric(slotLostDesc, prometheus.GaugeValue, lost, cause)
	}
	if stats.lsn != nil {
		ch <- prometheus.MustNewConstMetric(confirmedDesc, prometheus.GaugeValue, float64(stats.lsn.ConfirmedLSN()))
	}
}
