package app_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/debezium"
)

func TestTranslateMessagePrefixes(t *testing.T) {
	const decode = `"transforms.decode.type": "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent",`
	for _, tc := range []struct {
		name string
		// props are connector properties after the outbox router's type.
		transforms, props string
		want              []string // cdc.message_prefixes; nil: not set
		// note is the words of a note on the configuration, with its
		// severity.
		note     string
		severity debezium.Severity
	}{
		{name: "transform before the router", transforms: "decode,outbox", props: decode + `"message.prefix.include.list": "outbox, billing\\.events"`,
			want: []string{"outbox", "billing.events"}, note: "cdc.message_prefixes", severity: debezium.Info},
		{name: "an unescaped dot is taken literally", transforms: "decode,outbox", props: decode + `"message.prefix.include.list": "a.b"`,
			want: []string{"a.b"}, note: "taken literally", severity: debezium.Warning},
		{name: "a pattern is refused", transforms: "decode,outbox", props: decode + `"message.prefix.include.list": "outbox.*"`,
			note: "is a pattern", severity: debezium.Unsupported},
		{name: "every prefix is refused", transforms: "decode,outbox", props: decode[:len(decode)-1],
			note: "list them", severity: debezium.Unsupported},
		{name: "exclude list is refused", transforms: "decode,outbox", props: decode + `"message.prefix.include.list": "outbox", "message.prefix.exclude.list": "x"`,
			want: []string{"outbox"}, note: "name the prefixes to relay", severity: debezium.Unsupported},
		{name: "transform after the router is refused", transforms: "outbox,decode", props: decode + `"message.prefix.include.list": "outbox"`,
			note: "after the outbox router", severity: debezium.Unsupported},
		{name: "prefixes without the transform relay nothing", transforms: "outbox", props: `"message.prefix.include.list": "outbox"`,
			note: "no messages are relayed", severity: debezium.Warning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := `{"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
"database.hostname": "db", "database.user": "u", "database.dbname": "d", "topic.prefix": "p",
"plugin.name": "pgoutput", "table.include.list": "public.outbox",
"transforms": "` + tc.transforms + `", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter", ` + tc.props + `}`
			tr := translate(t, text, debezium.Env{})
			got, ok := tr.Setting("cdc.message_prefixes")
			if tc.want == nil && ok {
				t.Errorf("cdc.message_prefixes is %v, want it unset", got)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("cdc.message_prefixes is %v, want %v", got, tc.want)
			}
			var notes []string
			found := false
			for _, n := range tr.Notes {
				notes = append(notes, fmt.Sprintf("%v: %s: %s", n.Severity, n.Option, n.Text))
				if strings.Contains(n.Text, tc.note) && n.Severity == tc.severity {
					found = true
				}
			}
			if !found {
				t.Errorf("no %v note saying %q; notes:\n%s", tc.severity, tc.note, strings.Join(notes, "\n"))
			}
			if (tc.severity == debezium.Unsupported) != (tr.Err() != nil) {
				t.Errorf("Err() = %v with a %v note", tr.Err(), tc.severity)
			}
		})
	}
}
