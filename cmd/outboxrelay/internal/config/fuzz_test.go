package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/poller"
)

// FuzzLoad loads a configuration file and two environment variables, as
// outboxrelay does at start. Whatever they hold, Load must not panic, and
// a configuration it accepts must hold no SQL name that PostgreSQL would
// not keep as written or that could end a line of printed SQL (a line
// feed in outbox.table would run the rest as SQL after a -- comment).
// The DDL the poller prints for it must hold no control character but its
// own line ends.
//
// Run: go test -run XXX -fuzz FuzzLoad -fuzztime 10s ./cmd/outboxrelay/internal/config/
// (seeds in testdata/fuzz/FuzzLoad).
func FuzzLoad(f *testing.F) {
	for _, seed := range []struct {
		yaml, env1, env2 string
	}{
		{"postgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\n", "", ""},
		{"source: poll\npostgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\noutbox:\n  table: app.outbox\n", "", ""},
		{"postgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\noutbox:\n  table: \"public.outbox\\nDROP TABLE victim; --\"\n", "", ""},
		{"postgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\n", "OUTBOXRELAY_OUTBOX_TABLE=public.out\rbox", "OUTBOXRELAY_CDC_PUBLICATION=pub\n\\! ls"},
		{"source: poll\npostgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\noutbox:\n  tables: [a.outbox, {name: b.outbox, columns: {payload: \"p\\x1b\"}}]\npoll:\n  order_column: \"s\\teq\"\n", "", ""},
		{"source: poll\npostgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\noutbox:\n  table: public." + strings.Repeat("é", 21) + "\n", "OUTBOXRELAY_POLL_NOTIFY_CHANNEL=ch\u2028an", "OUTBOXRELAY_POLL_DEAD_LETTER_TABLE=dl.\u202Ex"},
		{"outbox:\n  columns:\n    id: 'we\"ird; DROP TABLE x; --'\n", "OUTBOXRELAY_POSTGRES_URL=postgres://u@h/d", "OUTBOXRELAY_KAFKA_BROKERS=k:9092"},
	} {
		f.Add([]byte(seed.yaml), seed.env1, seed.env2)
	}
	f.Fuzz(func(t *testing.T, data []byte, env1, env2 string) {
		environ := []string{env1, env2}
		if readsFiles(data, environ) {
			t.Skip("names a file to read (a *_file key), which a fuzz input may point at /dev/zero")
		}
		path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, environ)
		if err != nil {
			return
		}
		for key, name := range sqlNames(cfg) {
			if err := pgident.Check(name); err != nil {
				t.Errorf("accepted %q = %q, which %v", key, name, err)
			}
		}
		if cfg.Source != "poll" {
			return
		}
		for _, pc := range cfg.PollConfigs() {
			for _, r := range poller.DDL(pc) {
				if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
					t.Errorf("the poller's DDL for an accepted configuration holds U+%04X:\n%s", r, poller.DDL(pc))
					break
				}
			}
		}
	})
}

// readsFiles reports whether the configuration data and environ make would
// have Load read a file: any *_file key set, in the file or the
// environment (however the YAML spells the key).
func readsFiles(data []byte, environ []string) bool {
	var c Config
	_ = Parse(data, &c)
	_ = applyEnv(&c, environ)
	found := false
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, _ reflect.StructField, v reflect.Value) {
		if strings.HasSuffix(key, "_file") && !v.IsZero() {
			found = true
		}
	})
	return found
}

// sqlNames are the names an accepted configuration puts into SQL, by the
// key they come from: the source's own and the outbox tables' and their
// columns.
func sqlNames(c *Config) map[string]string {
	names := map[string]string{}
	for _, t := range c.Outbox.TableNames() {
		if schema, table, err := cdc.SplitTable(t); err == nil {
			names["outbox table "+t+" (schema)"] = schema
			names["outbox table "+t] = table
		} else {
			names["outbox table"] = t
		}
		m := c.ColumnsOf(t).WithDefaults()
		for role, col := range map[string]string{"id": m.ID, "aggregatetype": m.AggregateType, "aggregateid": m.AggregateID, "type": m.Type, "payload": m.Payload} {
			names[t+" column "+role] = col
		}
	}
	switch c.Source {
	case "cdc":
		cc := c.CDCConfig()
		cc.SetDefaults()
		names["cdc.slot"], names["cdc.publication"] = cc.Slot, cc.Publication
	case "poll":
		for _, pc := range c.PollConfigs() {
			pc.SetDefaults()
			names[pc.Table+" poll.order_column"] = pc.OrderColumn
			names[pc.Table+" poll.attempts_column"] = pc.AttemptsColumn
			names[pc.Table+" poll.notify_channel"] = pc.NotifyChannel
			if pc.Mode == poller.ModeMark {
				names[pc.Table+" poll.published_column"] = pc.PublishedColumn
			}
			for i, part := range strings.SplitN(pc.DeadLetterTable, ".", 2) {
				names[pc.Table+" poll.dead_letter_table part "+string(rune('0'+i))] = part
			}
		}
	}
	return names
}
