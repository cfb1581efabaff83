package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryProblemOfEverySection proves that Load reports the problems of
// several sections together, from the file, the environment and secret
// files, each once, instead of stopping at the first.
func TestEveryProblemOfEverySection(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-password")
	for _, tc := range []struct {
		name string
		file string
		env  []string
		want []string
	}{
		{
			// Both reported at once: were only the source reported,
			// fixing the typo would only reveal the next one.
			name: "unknown source and a bad poll section",
			file: "source: cdcx\npoll:\n  buckets: 3\nkafka:\n  brokers: [k:9092]\n",
			want: []string{`source: "cdcx" is not cdc or poll`, "poll.buckets: 3 is not a power of two", "postgres.url is required"},
		},
		{
			name: "unknown source and a bad cdc section",
			file: "source: pol\ncdc:\n  slot: Bad-Slot\npostgres:\n  url: postgres://u@h/db\nkafka:\n  brokers: [k:9092]\n",
			want: []string{`source: "pol" is not cdc or poll`, `cdc.slot: "Bad-Slot" is not a valid slot name`},
		},
		{
			name: "cdc, kafka, http and log",
			file: "cdc:\n  slot: Bad-Slot\nkafka:\n  brokers: [nohost]\n  compression: brotli\nhttp:\n  listen: everywhere\nlog:\n  format: xml\n",
			want: []string{
				"postgres.url is required", `cdc.slot: "Bad-Slot"`, `kafka.brokers: "nohost" has no port`,
				`kafka.compression: "brotli"`, `http.listen: "everywhere" is not host:port`, `log.format: "xml"`,
			},
		},
		{
			name: "poll, kafka limits and Debezium routing",
			file: "source: poll\npostgres:\n  url: postgres://u@h/db\npoll:\n  mode: archive\n  batch_size: -5\nkafka:\n  brokers: [k:9092]\n  max_record_bytes: 100\n  max_buffered_bytes: 10\nrouting:\n  key_format: thrift\n",
			want: []string{
				`poll.mode: "archive"`, "poll.batch_size: -5", "kafka.max_record_bytes (100) is larger than kafka.max_buffered_bytes (10)",
				`routing.key_format: "thrift"`,
			},
		},
		{
			name: "table patterns with the poller, and one Go cannot read",
			file: "source: poll\npostgres:\n  url: postgres://u@h/db\nkafka:\n  brokers: [k:9092]\noutbox:\n  table_patterns: ['public\\.(?!x).*']\n",
			want: []string{"outbox.table_patterns: source poll polls tables it is given by name"},
		},
		{
			name: "a table pattern Go cannot read",
			file: "postgres:\n  url: postgres://u@h/db\nkafka:\n  brokers: [k:9092]\noutbox:\n  table_patterns: ['public\\.(?!x).*']\n",
			want: []string{`outbox.table_patterns: "public\\.(?!x).*" is not a regular expression Go reads`},
		},
		{
			// Issue 24: the bounds on what data can shape.
			name: "topic pattern and metrics bound",
			file: "postgres:\n  url: postgres://u@h/db\nkafka:\n  brokers: [k:9092]\nrouting:\n  topic_pattern: 'outbox\\.(order'\nmetrics:\n  max_topics: -1\n",
			want: []string{"routing: topic pattern `outbox\\.(order` is not a regular expression", "metrics.max_topics: -1 is negative"},
		},
		{
			// The router's connection has the same bounds as the
			// source's: a bad one is the source's problem, said once.
			name: "postgres network bounds with Debezium routing",
			file: "postgres:\n  url: postgres://u@h/db\n  keepalive: -1s\nkafka:\n  brokers: [k:9092]\nrouting:\n  value_format: json\n",
			want: []string{"postgres.keepalive: -1s is negative"},
		},
		{
			name: "unknown key, bad environment variable and a bad section",
			file: "source: cdcx\nkafka_brokers: [k:9092]\npostgres:\n  url: postgres://u@h/db\n",
			env:  []string{"OUTBOXRELAY_KAFKA_MAX_BUFFERED_BYTES=lots", "OUTBOXRELAY_LOG_LEVEL=loud"},
			want: []string{
				"kafka_brokers is not a key; did you mean kafka.brokers", `OUTBOXRELAY_KAFKA_MAX_BUFFERED_BYTES: "lots" is not a whole number`,
				`source: "cdcx"`, "kafka.brokers: at least one broker", `log.level: "loud"`,
			},
		},
		{
			name: "secret file and other sections",
			file: "postgres:\n  url: postgres://u@h/db\n  password_file: " + missing + "\nkafka:\n  brokers: [k:9092]\n  linger: -1s\nshutdown:\n  timeout: 1s\nlog:\n  level: loud\n",
			want: []string{"postgres.password_file: open " + missing, "kafka.linger: -1s is negative", `log.level: "loud"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.file), tc.env)
			if err == nil {
				t.Fatalf("loaded without an error; want %q", tc.want)
			}
			msg := err.Error()
			for _, want := range tc.want {
				if n := strings.Count(msg, want); n != 1 {
					t.Errorf("the error says %q %d times, want once; the error:\n%s", want, n, msg)
				}
			}
			lines := map[string]bool{}
			for line := range strings.SplitSeq(msg, "\n") {
				if lines[line] {
					t.Errorf("the error repeats %q; the error:\n%s", line, msg)
				}
				lines[line] = true
			}
		})
	}
}

func TestJoinDistinct(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	for _, tc := range []struct {
		name string
		errs []error
		want string
	}{
		{"none", []error{nil, nil}, ""},
		{"nested joins are flattened and repeats dropped", []error{errors.Join(a, b), nil, errors.Join(errors.Join(b), a)}, "a\nb"},
		// Splitting it would drop "both: ", which says how a and b relate.
		{"several %w keep their context", []error{fmt.Errorf("both: %w and %w", a, b), a}, "both: a and b\na"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if err := joinDistinct(tc.errs...); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
