package bench

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// The format drains relay the backlog through Debezium's records, with
// the key and value written as JsonConverter with schemas (Debezium's
// default) and as Confluent's AvroConverter through a Schema Registry, so
// the report shows what Avro costs beside JSON. Each has its own slot,
// made with the others before the backlog is written.
const (
	formatsSource = "cdc-avro" // Config.Sources' name for both drains
	cdcJSONSlot   = "bench_cdc_json"
	cdcAvroSlot   = "bench_cdc_avro"
)

// formatDrain is the CDC relay on the backlog writing keys and values in
// format; registry, for avro, is the Schema Registry's URL.
func formatDrain(format, slot string, registry func(*run) string) drainKind {
	return drainKind{
		name:      "cdc-" + format,
		instances: 1,
		slot:      slot,
		prepare:   func(context.Context, *run) (string, error) { return backlogTable, nil },
		source: func(r *run, _ int) string {
			s := fmt.Sprintf("source: cdc\ncdc:\n  slot: %s\n  publication: %s\nrouting:\n  key_format: %s\n  value_format: %s\n", slot, publication, format, format)
			if registry != nil {
				s += fmt.Sprintf("schema_registry:\n  url: %s\n", registry(r))
			}
			return s
		},
	}
}

// measureFormats runs the JSON and the Avro drain. The registry runs in
// this process (franz-go's srfake): the relay registers two schemas per
// topic, then takes their ids from its cache, so the registry's own speed
// does not show in the drain.
func (r *run) measureFormats(ctx context.Context) error {
	if err := r.runDrain(ctx, formatDrain("json+schema", cdcJSONSlot, nil)); err != nil {
		return err
	}
	if err := r.db.dropSlot(ctx, cdcJSONSlot); err != nil {
		return err
	}
	reg := srfake.New()
	defer reg.Close()
	if err := r.runDrain(ctx, formatDrain("avro", cdcAvroSlot, func(*run) string { return reg.URL() })); err != nil {
		return err
	}
	return r.db.dropSlot(ctx, cdcAvroSlot)
}
