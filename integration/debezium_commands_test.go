package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestDebeziumConfigOnEveryCommand: someone migrating from Debezium runs
// check, init and config-dump on the connector's own JSON, as run and
// backfill take it, without translating it first.
func TestDebeziumConfigOnEveryCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, _, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	_, brokers := testenv.Kafka(t)
	file := writeTemp(t, "connector.json", exampleConnector(pgURL, slot, ""))
	env := []string{"OUTBOXRELAY_KAFKA_BROKERS=" + strings.Join(brokers, ",")}

	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"check"}, []string{"PASS    replication slot", `slot "` + slot + `"`, "inventory.outboxevent"}},
		{[]string{"config-dump"}, []string{"slot: " + slot, "table: inventory.outboxevent", "# memory to allow"}},
		{[]string{"init", "--no-slot"}, []string{"CREATE PUBLICATION", "dbz_publication", "inventory"}},
	} {
		cmd := exec.CommandContext(ctx, binary(t), append(tc.args, "--debezium-config", file)...)
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("outboxrelay %s --debezium-config: %v\n%s", tc.args[0], err, out)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(string(out), s) {
				t.Errorf("outboxrelay %s --debezium-config does not say %q:\n%s", tc.args[0], s, out)
			}
		}
	}
}
