package integration

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestRelayOverTLSAndSCRAM runs the whole relay, configured the way an
// operator would (keys in the environment, the SASL password in a mounted
// file), against a broker that accepts only TLS with SCRAM-SHA-256, at
// log.level debug, and reads the events back: they all arrive, and neither
// the SASL password nor the PostgreSQL one appears in the log.
func TestRelayOverTLSAndSCRAM(t *testing.T) {
	ctx := context.Background()
	const pgPassword, saslPassword = "Pg-6c1d-do-not-log", "Sasl-77ab-do-not-log"
	certs := testenv.NewCerts(t)
	_, brokers := testenv.Kafka(t, kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "relay", saslPassword))

	adminURL := testenv.Postgres(t)
	admin := connectPool(t, adminURL)
	const table = "outbox"
	createOutbox(t, admin, table)
	u, _ := url.Parse(adminURL)
	u.User = url.UserPassword("postgres", pgPassword) // trusted locally; the relay must still hide it
	pwFile := filepath.Join(t.TempDir(), "sasl-password")
	if err := os.WriteFile(pwFile, []byte(saslPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startApp(t, map[string]string{
		"postgres.url":             u.String(),
		"outbox.table":             "public." + table,
		"cdc.slot":                 "secure_slot",
		"kafka.brokers":            strings.Join(brokers, ","),
		"kafka.tls.enabled":        "true",
		"kafka.tls.ca_file":        certs.CAFile,
		"kafka.sasl.mechanism":     "scram-sha-256",
		"kafka.sasl.username":      "relay",
		"kafka.sasl.password_file": pwFile,
		"http.listen":              "127.0.0.1:0",
		"log.level":                "debug",
	})

	workload{table: table, writers: 2, aggregates: 5, events: 40}.write(ctx, t, admin)
	want := readRows(ctx, t, admin, table)
	opts, err := sink.ClientOptions(sink.Config{Brokers: brokers,
		TLS:  sink.TLS{Enabled: true, CAFile: certs.CAFile},
		SASL: sink.SASL{Mechanism: "scram-sha-256", Username: "relay", Password: saslPassword}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics("outbox.event.order"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(got) < len(want) && deadline.Err() == nil {
		cl.PollFetches(deadline).EachRecord(func(r *kgo.Record) { got[header(r, "id")] = true })
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("%d of %d events arrived over TLS and SCRAM", len(got), len(want))
		}
	}
	a.stop(t)
	logs := a.logs.String()
	for _, secret := range []string{pgPassword, saslPassword} {
		if i := strings.Index(logs, secret); i >= 0 {
			t.Errorf("the log shows a password: ...%s...", logs[max(0, i-200):min(len(logs), i+50)])
		}
	}
}
