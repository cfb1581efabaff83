package poller

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{URL: "postgres://localhost/app"}
	c.SetDefaults()
	want := Config{
		URL: "postgres://localhost/app", Table: "public.outbox", Columns: connector.ColumnMap{}.WithDefaults(),
		Interval: 500 * time.Millisecond, MaxInterval: 5 * time.Second, BatchSize: 1000, MaxBatchBytes: 16 << 20, Claims: 2, Mode: ModeMark,
		OrderColumn: "seq", PublishedColumn: "published_at", AttemptsColumn: "publish_attempts",
		Retention: 24 * time.Hour, RetentionBatchSize: 1000, MaxAttempts: 3, DeadLetterTable: "outbox_dead_letter",
		NotifyChannel: "outboxrelay", Buckets: 64,
		Network: pgsql.Network{Keepalive: 5 * time.Second, TCPUserTimeout: 10 * time.Second, ConnectTimeout: 10 * time.Second, QueryTimeout: 30 * time.Second},
	}
	if c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}

	d := Config{URL: "postgres://localhost/app", Table: "app.events", Mode: ModeDelete, Interval: 10 * time.Second}
	d.SetDefaults()
	if d.Retention != 0 || d.DeadLetterTable != "events_dead_letter" || d.MaxInterval != 10*time.Second {
		t.Errorf("delete mode defaults: retention %s, dead letter %q, max interval %s", d.Retention, d.DeadLetterTable, d.MaxInterval)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("delete mode defaults do not validate: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		// want are the fragments the error must hold; none means valid.
		want []string
	}{
		{"valid", func(*Config) {}, nil},
		{"quoted names are fine", func(c *Config) {
			c.OrderColumn, c.NotifyChannel, c.DeadLetterTable = `Order "Col"`, "Chan-1", `dl."Dead"`
		}, nil},
		{"no url", func(c *Config) { c.URL = "" }, []string{"postgres.url is required"}},
		{"bad url", func(c *Config) { c.URL = "postgres://u:secret@host:notaport/db" }, []string{"postgres.url"}},
		{"bad table", func(c *Config) { c.Table = "a.b.c" }, []string{`outbox.table: "a.b.c"`}},
		{"bad mode", func(c *Config) { c.Mode = "archive" }, []string{`poll.mode: "archive" is not mark or delete`}},
		{"negative retention batch", func(c *Config) { c.RetentionBatchSize = -1 }, []string{"poll.retention_batch_size: -1 is not between 1 and 100000"}},
		{"published is payload", func(c *Config) { c.PublishedColumn = "payload" }, []string{`poll.published_column: "payload" is the outbox's payload column`}},
		{"attempts is order", func(c *Config) { c.AttemptsColumn = "seq" }, []string{`poll.attempts_column: "seq" is also poll.order_column`}},
		{"long name", func(c *Config) { c.OrderColumn = strings.Repeat("x", 64) }, []string{"poll.order_column", "63-byte limit"}},
		// Issue 24: a line break in a name ended a -- comment of poll-ddl's
		// output, and what followed ran as SQL (or, in psql, as a \! command).
		{"line feed in the table", func(c *Config) { c.Table = "public.outbox\nDROP TABLE victim; --" },
			[]string{`outbox.table: "public.outbox\nDROP TABLE victim; --" contains a control character (a line feed, U+000A at byte 13)`}},
		{"carriage return in the schema", func(c *Config) { c.Table = "pub\rlic.outbox" }, []string{`outbox.table: "pub\rlic.outbox"`, "a carriage return"}},
		{"escape in a column", func(c *Config) { c.Columns.Payload = "pay\x1bload" }, []string{`outbox.columns.payload: "pay\x1bload" contains a control character`}},
		{"tab in the order column", func(c *Config) { c.OrderColumn = "s\teq" }, []string{`poll.order_column: "s\teq"`, "a tab"}},
		{"invalid UTF-8 in the published column", func(c *Config) { c.PublishedColumn = "pub\xffd" }, []string{`poll.published_column: "pub\xffd" is not valid UTF-8`}},
		{"line separator in the attempts column", func(c *Config) { c.AttemptsColumn = "a\u2028b" }, []string{"poll.attempts_column", "line or paragraph separator"}},
		{"line feed in the dead-letter table", func(c *Config) { c.DeadLetterTable = "dl.x\ny" }, []string{`poll.dead_letter_table: "dl.x\ny"`, "a line feed"}},
		{"line feed in a dead-letter table of the outbox's schema", func(c *Config) { c.DeadLetterTable = "x\ny" }, []string{`poll.dead_letter_table: "x\ny"`, "a line feed"}},
		{"bidirectional override in the channel", func(c *Config) { c.NotifyChannel = "ch\u202Ean" }, []string{"poll.notify_channel", "bidirectional"}},
		{"intervals", func(c *Config) { c.Interval, c.MaxInterval = -time.Second, -2*time.Second }, []string{"poll.interval: -1s must be positive", "poll.max_interval"}},
		{"max below interval", func(c *Config) { c.Interval, c.MaxInterval = time.Second, time.Millisecond }, []string{"poll.max_interval: 1ms is shorter"}},
		{"batch", func(c *Config) { c.BatchSize = -1 }, []string{"poll.batch_size: -1"}},
		{"batch bytes", func(c *Config) { c.MaxBatchBytes = -1 }, []string{"poll.max_batch_bytes: -1 is negative"}},
		{"retention", func(c *Config) { c.Retention = -time.Hour }, []string{"poll.retention: -1h0m0s is negative"}},
		{"retention in delete mode", func(c *Config) { c.Mode = ModeDelete; c.Retention = time.Hour }, []string{"applies only to mode mark"}},
		{"attempts", func(c *Config) { c.MaxAttempts = -1 }, []string{"poll.max_attempts: -1 must be at least 1"}},
		{"dead letter is outbox", func(c *Config) { c.DeadLetterTable = "public.outbox" }, []string{"is the outbox table itself"}},
		{"dead letter bad", func(c *Config) { c.DeadLetterTable = "a.b.c" }, []string{"poll.dead_letter_table"}},
		{"channel", func(c *Config) { c.NotifyChannel = "a\x00b" }, []string{"poll.notify_channel", "NUL"}},
		{"buckets not a power of two", func(c *Config) { c.Buckets = 48 }, []string{"poll.buckets: 48 is not a power of two"}},
		{"too many buckets", func(c *Config) { c.Buckets = 2048 }, []string{"poll.buckets: 2048"}},
		{"every problem at once", func(c *Config) { c.URL, c.Mode, c.Buckets, c.BatchSize = "", "x", 3, -5 },
			[]string{"postgres.url", "poll.mode", "poll.buckets", "poll.batch_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{URL: "postgres://relay@localhost/app"}
			c.SetDefaults()
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error saying %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v\nwant it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the password: %v", err)
			}
			if _, nerr := New(c); nerr == nil {
				t.Errorf("New accepted a config that does not validate")
			}
		})
	}
}

func TestDDL(t *testing.T) {
	mark := DDL(Config{})
	for _, want := range []string{
		`ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "seq" bigint GENERATED ALWAYS AS IDENTITY;`,
		`ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "published_at" timestamptz;`,
		`ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "publish_attempts" integer NOT NULL DEFAULT 0;`,
		`CREATE INDEX IF NOT EXISTS "outbox_outboxrelay_unpublished" ON "public"."outbox" ("seq", "id") WHERE "published_at" IS NULL;`,
		`CREATE INDEX IF NOT EXISTS "outbox_outboxrelay_published" ON "public"."outbox" ("published_at") WHERE "published_at" IS NOT NULL;`,
		`CREATE TABLE IF NOT EXISTS "public"."outbox_dead_letter" (`,
		`CREATE TRIGGER "outboxrelay_notify" AFTER INSERT ON "public"."outbox"`,
		`FOR EACH STATEMENT EXECUTE FUNCTION "public"."outboxrelay_notify"('outboxrelay');`,
	} {
		if !strings.Contains(mark, want) {
			t.Errorf("mark mode DDL lacks\n%s\nin\n%s", want, mark)
		}
	}

	del := DDL(Config{Table: `App."Events"`, Mode: ModeDelete, OrderColumn: "created_at", NotifyChannel: "it's",
		Columns: connector.ColumnMap{ID: "event_id"}, DeadLetterTable: "dead.letters"})
	for _, want := range []string{
		`ALTER TABLE "App"."""Events""" ADD COLUMN IF NOT EXISTS "created_at" bigint GENERATED ALWAYS AS IDENTITY;`,
		`CREATE INDEX IF NOT EXISTS """Events""_outboxrelay_unpublished" ON "App"."""Events""" ("created_at", "event_id");`,
		`CREATE TABLE IF NOT EXISTS "dead"."letters" (`,
		`EXECUTE FUNCTION "App"."outboxrelay_notify"('it''s');`,
	} {
		if !strings.Contains(del, want) {
			t.Errorf("delete mode DDL lacks\n%s\nin\n%s", want, del)
		}
	}
	if strings.Contains(del, "published_at") {
		t.Errorf("delete mode DDL adds a published column:\n%s", del)
	}

	long := DDL(Config{Table: strings.Repeat("t", 63)})
	if !strings.Contains(long, `"`+strings.Repeat("t", 63-len("_outboxrelay_unpublished"))+`_outboxrelay_unpublished"`) {
		t.Errorf("index name of a 63-byte table is not cut to 63 bytes:\n%s", long)
	}
	// Issue 24: 21 × é is 42 bytes; the index names were cut at 39 and 41
	// bytes, inside an é, and PostgreSQL refused the script.
	multi := DDL(Config{Table: strings.Repeat("é", 21)})
	for _, want := range []string{
		`CREATE INDEX IF NOT EXISTS "` + strings.Repeat("é", 19) + `_outboxrelay_unpublished"`,
		`CREATE INDEX IF NOT EXISTS "` + strings.Repeat("é", 20) + `_outboxrelay_published"`,
	} {
		if !strings.Contains(multi, want) {
			t.Errorf("DDL of a 21 × é table lacks\n%s\nin\n%s", want, multi)
		}
	}
	if !utf8.ValidString(multi) {
		t.Errorf("DDL of a 21 × é table is not valid UTF-8:\n%q", multi)
	}
}

// TestDDLNoLineBreakOut: DDL does not validate, and a name that would
// not pass validation still cannot end a line of its output, comments
// included, so nothing after it runs as SQL or as a psql command (a name
// printed raw in a -- comment would end it at its line feed).
func TestDDLNoLineBreakOut(t *testing.T) {
	for _, tc := range []struct{ name, table, channel string }{
		{"line feed then SQL", "public.outbox\nDROP TABLE victim; --", ""},
		{"carriage return then SQL", "public.outbox\rDROP TABLE victim; --", ""},
		{"line feed then a psql command", "public.outbox\n\\! touch /tmp/x #", ""},
		{"line feed in the channel", "", "chan\nDROP TABLE victim; --"},
		{"backslash quote in the channel", "", `chan\'); DROP TABLE victim; --`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ddl := DDL(Config{Table: tc.table, NotifyChannel: tc.channel})
			if strings.ContainsRune(ddl, '\r') {
				t.Errorf("DDL holds a carriage return:\n%q", ddl)
			}
			for line := range strings.SplitSeq(ddl, "\n") {
				if l := strings.TrimSpace(line); strings.HasPrefix(l, "DROP TABLE victim") || strings.HasPrefix(l, `\!`) {
					t.Errorf("a name broke out onto a line of its own: %q\nin\n%s", line, ddl)
				}
			}
			if tc.table != "" && !strings.Contains(ddl, "-- What `source: poll` needs on \"public\".U&\"outbox\\000") {
				t.Errorf("the first comment does not name the table in its escape form:\n%s", ddl)
			}
		})
	}
}
