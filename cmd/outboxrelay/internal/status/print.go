package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/httpserver"
)

// WriteRelay writes the status a running relay gave, as lines of a
// terminal: what its status page shows, the chart left out.
func WriteRelay(w io.Writer, from string, s httpserver.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	ready := "ready"
	if !s.Ready {
		ready = "NOT READY"
	}
	fmt.Fprintf(tw, "outboxrelay %s at %s: %s\n\n", s.Version, from, ready)
	for _, c := range s.Readiness {
		state := "ok"
		if !c.OK {
			state = "FAIL"
		}
		if c.Message != "" {
			state += ": " + c.Message
		}
		line("  "+c.Name, "%s", state)
	}
	connected := "not connected"
	switch {
	case s.SourceUp:
		connected = "connected"
	case s.Standby:
		connected = "standby, waiting for the slot"
	}
	line("source", "%s, %s; tables %s", s.Source, connected, strings.Join(s.Tables, ", "))
	line("postgres", "%s", s.Postgres)
	line("kafka", "%s", strings.Join(s.Brokers, ", "))
	if sl := s.Slot; sl != nil {
		writeRelaySlot(line, sl)
	}
	if p := s.Poll; p != nil {
		line("poller", "%s, every %s, %d bucket(s)", p.Mode, p.Interval, p.Buckets)
		writeTables(line, p.Tables)
		if p.Error != "" {
			line("backlog", "%s", p.Error)
		}
	}
	lag := Seconds(s.Lag.Seconds)
	if s.Lag.Bytes != nil {
		lag += ", " + httpserver.Bytes(int64(*s.Lag.Bytes)) + " of WAL"
	}
	line("lag", "%s", lag)
	line("in flight", "%d", s.EventsInFlight)
	line("rate", "%s events/s now; %d acknowledged since %s", rate(s.Rate.EventsPerSecond), s.EventsAcknowledged, When(s.StartedAt))
	line("last committed", "%s", event(s.LastCommitted, s.Time, "read"))
	line("last published", "%s", event(s.LastPublished, s.Time, "in Kafka"))
	line("dead letters", "%d", s.DeadLetters.Total)
	for _, d := range s.DeadLetters.Recent {
		line("  "+d.ID, "%s (%s, %s)", d.Reason, orNone(d.Topic), When(d.At))
	}
	if c := s.DeadLetters.Command; c != "" && s.DeadLetters.Total > 0 {
		line("  send them on", "%s redrive, once the routing is fixed (%s list shows them)", c, c)
	}
	line("restarts", "%d", s.Restarts)
	if e := s.LastError; e != nil {
		line("last error", "%s (%s)", e.Message, When(e.At))
	}
	return tw.Flush()
}

func writeRelaySlot(line func(k, format string, a ...any), sl *httpserver.Slot) {
	switch {
	case sl.Error != "":
		line("slot", "%s: %s", sl.Name, sl.Error)
		return
	case !sl.Exists:
		line("slot", "%s does not exist (yet)", sl.Name)
		return
	}
	state := "not streamed from"
	if sl.Active {
		state = "active"
	}
	if sl.ActivePID != nil {
		state += fmt.Sprintf(", held by PID %d", *sl.ActivePID)
	}
	line("slot", "%s: %s, wal_status %s, confirmed_flush_lsn %s", sl.Name, state, sl.WALStatus, sl.ConfirmedFlushLSN)
	line("WAL it may keep", "%s", httpserver.Headroom(sl.WALStatus, sl.SafeWALSizeBytes, sl.MaxWALKeepSizeBytes))
}

func writeTables(line func(k, format string, a ...any), ts []httpserver.Table) {
	for _, t := range ts {
		oldest := ""
		if t.OldestUnpublished != nil {
			oldest = ", the oldest " + When(*t.OldestUnpublished)
		}
		line("  "+t.Name, "%d row(s) unpublished%s", t.Unpublished, oldest)
	}
}

// Write writes what PostgreSQL and Kafka say of a relay that did not
// answer.
func (r Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	line("source", "%s; tables %s", r.Source, strings.Join(r.Tables, ", "))
	line("postgres", "%s", r.Postgres)
	if s := r.Slot; s != nil {
		writeSlotReport(line, s)
	}
	if c := r.Checkpoint; c != nil && c.Key != "" {
		writeCheckpoint(line, c)
	}
	if r.Source != "cdc" {
		writeTables(line, r.Poll)
	}
	for _, p := range r.Problems {
		line("cannot read", "%s", p)
	}
	return tw.Flush()
}

func writeSlotReport(line func(k, format string, a ...any), s *SlotReport) {
	if !s.Exists {
		line("slot", "%s does not exist", s.Name)
		return
	}
	holder := "held by no session: no relay streams from it"
	if h := s.Holder; h != nil {
		holder = fmt.Sprintf("held by PID %d (%s", h.PID, orNone(h.ApplicationName))
		if h.ClientAddr != "" {
			holder += " from " + h.ClientAddr
		}
		if h.Since != nil {
			holder += ", since " + When(*h.Since)
		}
		holder += "): a relay streams from it, elsewhere"
	}
	line("slot", "%s: %s", s.Name, holder)
	lag := "unknown"
	if s.LagBytes != nil {
		lag = httpserver.Bytes(*s.LagBytes)
	}
	line("slot lag", "%s of WAL behind the server; confirmed_flush_lsn %s, wal_status %s", lag, s.ConfirmedFlushLSN, s.WALStatus)
	line("WAL it may keep", "%s", httpserver.Headroom(s.WALStatus, s.SafeWALSizeBytes, s.MaxWALKeepSizeBytes))
}

func writeCheckpoint(line func(k, format string, a ...any), c *CheckpointReport) {
	if !c.Found {
		line("checkpoint", "none in topic %s under %s (a relay that never published)", c.Topic, c.Key)
		return
	}
	whose := ""
	if c.Foreign {
		whose = " (written by another cluster, for the same database and slot)"
	}
	line("checkpoint", "%s, written %s ago by relay %s%s", c.EndLSN, Seconds(c.AgeSeconds), orNone(c.RelayVersion), whose)
	line("  last event", "%s, committed %s; %d events under this key", orNone(c.LastEventID), When(c.CommitTime), c.Events)
}

// Seconds is s as a duration, to a tenth of a second.
func Seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

// When is t in UTC, or "-" for no time.
func When(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

func rate(v float64) string { return fmt.Sprintf("%.1f", v) }

func event(e *httpserver.Event, now time.Time, what string) string {
	if e == nil {
		return "none yet"
	}
	return fmt.Sprintf("%s -> %s, committed %s, %s %s ago", e.ID, e.Topic, When(e.Timestamp), what, max(now.Sub(e.At), 0).Round(100*time.Millisecond))
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
