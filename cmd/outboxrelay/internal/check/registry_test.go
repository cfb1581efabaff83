package check_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestSchemaRegistry checks the registry of format avro: reachable and
// taking the credentials, with each subject's compatibility level reported
// for the topics of the events in the table; then each way it goes wrong,
// named with its fix.
func TestSchemaRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSetup(ctx, t, testenv.Postgres(t))
	s.exec(ctx, t, `SELECT pg_create_logical_replication_slot('outboxrelay', 'pgoutput')`,
		`INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'o-1', 'Created', '{}')`)
	reg := testenv.StartRegistry(t, "relay", "s3cret")
	reg.SetCompatibility("outbox.event.order-value", "FULL")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	section := func(url, pwFile, more string) string {
		return "routing:\n  key_format: avro\n  value_format: avro\nschema_registry:\n  url: " + url + "\n  username: relay\n  password_file: " + pwFile + "\n" + more
	}

	s.yaml["routing"] = section(reg.URL, pw, "")
	cfg, _ := s.config(t)
	r, _ := run(ctx, t, cfg)
	onlyFailures(t, r)
	expect(t, r, check.CheckRegistry, check.Pass, reg.URL, "answers")
	// The key's subject has no level of its own: the global one applies.
	expect(t, r, check.CheckRegistrySchema, check.Pass, "outbox.event.order-key BACKWARD", "outbox.event.order-value FULL")

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.yaml["routing"] = section(reg.URL, wrong, "")
	cfg, _ = s.config(t)
	r, _ = run(ctx, t, cfg)
	onlyFailures(t, r, check.CheckRegistry)
	expect(t, r, check.CheckRegistry, check.Fail, "refused the credentials", "HTTP 401", "password_file")
	expect(t, r, check.CheckRegistrySchema, check.Skip)

	s.yaml["routing"] = section(reg.URL, pw, "  auto_register: false\n")
	cfg, _ = s.config(t)
	r, _ = run(ctx, t, cfg)
	onlyFailures(t, r, check.CheckRegistrySchema)
	expect(t, r, check.CheckRegistrySchema, check.Fail, "auto_register is false", "outbox.event.order-key", "outbox.event.order-value")

	s.yaml["routing"] = section("http://"+closedPort(t), pw, "")
	cfg, _ = s.config(t)
	r, _ = run(ctx, t, cfg)
	onlyFailures(t, r, check.CheckRegistry)
	expect(t, r, check.CheckRegistry, check.Fail, "does not answer", "schema_registry.url")
}
