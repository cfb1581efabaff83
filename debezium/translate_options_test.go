package debezium

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

// Every option the file sets is mapped or named in a note; and every
// unsupported one is an error that names it.
func TestEveryOptionAccountedFor(t *testing.T) {
	opts := map[string]string{
		"name": "c", "tasks.max": "1", "snapshot.mode": "initial", "slot.drop.on.stop": "true", "errors.tolerance": "all",
		"topic.creation.default.partitions": "3", "heartbeat.action.query": "UPDATE x SET y = 1", "schema.exclude.list": "a",
		"column.exclude.list": "public.outbox.secret", "decimal.handling.mode": "double", "signal.data.collection": "public.sig",
		"converters": "boolean", "converters.boolean.type": "io.x.BooleanConverter", "database.tcpKeepAlive": "true",
		"transforms.outbox.tracing.operation.name": "op", "transforms.other.type": "x", "predicates": "p",
		"producer.override.partitioner.class": "org.example.MyPartitioner", "producer.override.acks": "1",
		"field.name.adjustment.mode": "avro", "schema.name.adjustment.mode": "avro", "binary.handling.mode": "hex",
		"value.converter": "io.apicurio.registry.utils.converter.ProtobufConverter", "header.converter": "org.example.H",
		"database.sslfactory": "org.example.F", "key.converter.schemas.cache.size": "10",
	}
	for k, v := range map[string]string{
		"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
		"database.user": "u", "database.dbname": "app", "topic.prefix": "p", "plugin.name": "pgoutput",
		"table.include.list": "public.outbox", "transforms": "outbox",
		"transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
	} {
		opts[k] = v
	}
	text, _ := json.Marshal(opts)
	f, err := ParseFile(text)
	if err != nil {
		t.Fatal(err)
	}
	tr := Translate(f, Env{})
	mapped := tr.mapped
	for _, k := range f.Props.Keys() {
		if !slices.Contains(mapped, k) && !slices.ContainsFunc(tr.Notes, func(n Note) bool { return n.Option == k }) {
			t.Errorf("option %s is neither mapped nor noted", k)
		}
	}
	var unsupported []string
	for _, n := range tr.Notes {
		if n.Severity == Unsupported {
			unsupported = append(unsupported, n.Option)
		}
	}
	for _, want := range []string{"converters", "producer.override.partitioner.class", "binary.handling.mode", "value.converter", "header.converter", "database.sslfactory"} {
		if !slices.Contains(unsupported, want) {
			t.Errorf("%s is not reported as unsupported; notes: %v", want, tr.Notes)
		}
	}
	err = tr.Err()
	for _, opt := range unsupported {
		found := false
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var oe *OptionError
			if errors.As(e, &oe) && oe.Option == opt {
				found = true
			}
		}
		if !found {
			t.Errorf("Err() does not name %s: %v", opt, err)
		}
	}
}
