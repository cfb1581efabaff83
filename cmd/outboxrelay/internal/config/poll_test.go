package config

import (
	"strings"
	"testing"
	"time"
)

const pollExample = `
postgres:
  url: postgres://relay@db:5432/app
outbox:
  table: app.events
source: poll
poll:
  interval: 200ms
  batch_size: 250
  mode: delete
  order_column: position
  dead_letter_table: ops.dead
  buckets: 16
kafka:
  brokers: [kafka:9092]
`

func TestPollSection(t *testing.T) {
	c, err := Load(writeFile(t, pollExample), []string{"OUTBOXRELAY_POLL_MAX_ATTEMPTS=7", "OUTBOXRELAY_POLL_NOTIFY_CHANNEL=events"})
	if err != nil {
		t.Fatal(err)
	}
	pc := c.PollConfig()
	if pc.URL != "postgres://relay@db:5432/app" || pc.Table != "app.events" || pc.Interval != 200*time.Millisecond ||
		pc.BatchSize != 250 || pc.Mode != "delete" || pc.OrderColumn != "position" || pc.DeadLetterTable != "ops.dead" ||
		pc.Buckets != 16 || pc.MaxAttempts != 7 || pc.NotifyChannel != "events" {
		t.Fatalf("poll config %+v", pc)
	}
}

func TestPollProblemsReportedOnlyForPoll(t *testing.T) {
	withRetention := strings.Replace(pollExample, "  mode: delete\n", "  mode: delete\n  retention: 1h\n", 1)
	if _, err := Load(writeFile(t, withRetention), nil); err == nil || !strings.Contains(err.Error(), "poll.retention: 1h0m0s applies only to mode mark") {
		t.Errorf("delete mode with a retention: %v", err)
	}
	bad := writeFile(t, issueExample+"poll:\n  mode: archive\n  buckets: 3\n")
	_, err := Load(bad, []string{"OUTBOXRELAY_SOURCE=poll"})
	for _, want := range []string{`poll.mode: "archive"`, "poll.buckets: 3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("source poll: error %v does not say %q", err, want)
		}
	}
	if _, err := Load(bad, nil); err != nil {
		t.Errorf("source cdc validates the poll section it does not use: %v", err)
	}
}

func TestReadDoesNotValidate(t *testing.T) {
	c, err := Read("", []string{"OUTBOXRELAY_OUTBOX_TABLE=app.events", "OUTBOXRELAY_POLL_MODE=delete"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Outbox.Table != "app.events" || c.Poll.Mode != "delete" || c.Source != "cdc" {
		t.Fatalf("read %+v", c)
	}
}
