package check

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// The Schema Registry checks, run with routing.key_format or value_format
// avro, json_sr or protobuf.
const (
	CheckRegistry       = "schema registry"
	CheckRegistrySchema = "schema registry subjects"
)

// checkRegistry checks that the Schema Registry answers and takes the
// relay's credentials, and reports the compatibility level of each subject
// the events now in the outbox table will use (with auto_register false,
// that each exists): a level that refuses the relay's schemas stops events
// the first time they come.
func checkRegistry(ctx context.Context, r *Report, cfg *config.Config, o options, pg pgFacts) {
	rc := cfg.DebeziumRouter()
	if rc == nil || !rc.UsesRegistry() {
		return
	}
	cl, err := debezium.NewRegistryClient(rc.Registry)
	if err != nil {
		r.add(Fail, CheckRegistry, "the schema_registry settings are not usable: "+err.Error(), "fix the schema_registry section of the configuration")
		r.skip(CheckRegistrySchema, "the registry could not be reached")
		return
	}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var shown []string
	for _, u := range rc.Registry.URLs {
		shown = append(shown, secret.Redact(u))
	}
	where := strings.Join(shown, ", ")
	subjects, err := cl.Subjects(cctx)
	if err != nil {
		var re *sr.ResponseError
		switch {
		case errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden):
			r.add(Fail, CheckRegistry, fmt.Sprintf("%s refused the credentials (HTTP %d: %s)", where, re.StatusCode, re.Message),
				"check schema_registry.username and password_file (basic.auth.user.info), and that the user may read and register subjects")
		case errors.As(err, &re):
			r.add(Fail, CheckRegistry, fmt.Sprintf("%s answered HTTP %d: %s", where, re.StatusCode, re.Message),
				"check that schema_registry.url is the registry's base URL (for Apicurio, its /apis/ccompat/v7)")
		default:
			r.add(Fail, CheckRegistry, fmt.Sprintf("%s does not answer: %v", where, err),
				"check schema_registry.url and that the relay can reach it (firewall, TLS: schema_registry.tls)")
		}
		r.skip(CheckRegistrySchema, "the registry could not be reached")
		return
	}
	r.pass(CheckRegistry, "%s answers, with %d subjects", where, len(subjects))

	rt := cfg.RunnerConfig()
	rt.SetDefaults()
	var topics []string
	switch {
	case rc.Topic != "":
		topics = []string{rc.Topic}
	case pg.sampled && rc.TopicRegex == "" && rc.TopicReplacement == "":
		for _, a := range pg.aggregateTypes {
			topics = append(topics, rt.Routing.TopicPrefix+a)
		}
	}
	if len(topics) == 0 {
		r.skip(CheckRegistrySchema, "which topics events will use is not known yet (an empty outbox table, or a topic regex)")
		return
	}
	if st := rc.Registry.SubjectNameStrategy; st != "" && st != debezium.SubjectTopic {
		r.skip(CheckRegistrySchema, "subject_name_strategy "+st+" names subjects after the records, which are known only when events come")
		return
	}
	var want []string
	for _, t := range topics {
		if rc.KeyFormat.UsesRegistry() {
			want = append(want, t+"-key")
		}
		if rc.ValueFormat.UsesRegistry() {
			want = append(want, t+"-value")
		}
	}
	var levels, missing []string
	var failed []error
	for _, res := range cl.Compatibility(sr.WithParams(cctx, sr.DefaultToGlobal), want...) {
		if res.Err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", res.Subject, res.Err))
			continue
		}
		levels = append(levels, fmt.Sprintf("%s %s", res.Subject, res.Level))
		if !slices.Contains(subjects, res.Subject) {
			missing = append(missing, res.Subject)
		}
	}
	switch {
	case len(failed) > 0:
		r.add(Fail, CheckRegistrySchema, "cannot read the compatibility level: "+errors.Join(failed...).Error(), "the user needs read access to the subjects' config")
	case len(missing) > 0 && rc.Registry.NoAutoRegister:
		r.add(Fail, CheckRegistrySchema, fmt.Sprintf("auto_register is false and no schema is registered under %s", strings.Join(missing, ", ")),
			"register the schemas (outboxrelay registers what Confluent's AvroConverter would; see docs/schema-registry.md#avro-with-a-schema-registry), or set schema_registry.auto_register true")
	default:
		r.pass(CheckRegistrySchema, "compatibility: %s", strings.Join(levels, ", "))
	}
}
