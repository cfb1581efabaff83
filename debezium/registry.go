package debezium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/internal/tlsfiles"
)

// Subject name strategies: how the subject a schema is registered under is
// named, as Confluent's serializers' key.subject.name.strategy and
// value.subject.name.strategy
// (io.confluent.kafka.serializers.subject.*).
const (
	// SubjectTopic is TopicNameStrategy, the default: <topic>-key and
	// <topic>-value.
	SubjectTopic = "topic"
	// SubjectRecord is RecordNameStrategy: the schema's full name.
	SubjectRecord = "record"
	// SubjectTopicRecord is TopicRecordNameStrategy: <topic>-<full name>.
	SubjectTopicRecord = "topic_record"
)

// SubjectNameStrategies are the strategies a RegistryConfig can name.
var SubjectNameStrategies = []string{SubjectTopic, SubjectRecord, SubjectTopicRecord}

// RegistryConfig is the Confluent-compatible Schema Registry that the avro
// format registers its schemas in (Confluent Schema Registry, Apicurio's
// ccompat API, Redpanda, Karapace). Its zero value, with a URL, is
// Confluent's serializer's default: register each schema under the
// topic's subject.
type RegistryConfig struct {
	// URLs are the registry's base URLs; the next is tried when one does
	// not answer. Required with format avro.
	URLs []string
	// Username and Password, when Username is set, authenticate with HTTP
	// basic auth (basic.auth.credentials.source USER_INFO).
	Username string
	Password string
	// TLS configures https connections.
	TLS RegistryTLS
	// NoAutoRegister looks each schema up under its subject instead of
	// registering it (auto.register.schemas=false); a schema not there is
	// an error for the event. Default false: register.
	NoAutoRegister bool
	// UseLatestVersion, with NoAutoRegister, writes every record with the
	// subject's latest schema and its id (use.latest.version=true). Default
	// false.
	UseLatestVersion bool
	// SubjectNameStrategy is one of SubjectNameStrategies. Default
	// SubjectTopic.
	SubjectNameStrategy string
	// RequestTimeout bounds one request to the registry. Default 10s.
	RequestTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between attempts while the
	// registry does not answer. Defaults 500ms and 30s.
	RetryMin, RetryMax time.Duration
}

// RegistryTLS is the client side of TLS to the registry, for https URLs:
// the files the relay's other TLS settings take too.
type RegistryTLS = tlsfiles.Files

// tlsKey names the registry's TLS settings in errors.
const tlsKey = "schema_registry.tls"

func (c *RegistryConfig) setDefaults() {
	if c.SubjectNameStrategy == "" {
		c.SubjectNameStrategy = SubjectTopic
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.RetryMin == 0 {
		c.RetryMin = 500 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 30 * time.Second
	}
}

func (c *RegistryConfig) validate() []error {
	var errs []error
	if len(c.URLs) == 0 {
		errs = append(errs, errors.New("a key or value format of the Schema Registry (avro, json_sr, protobuf) needs schema_registry.url, the registry its schemas are registered in"))
	}
	for _, u := range c.URLs {
		// secret.Redact: a URL that does not parse still holds the
		// password of its user info, and url's error quotes all of it,
		// so only its cause (the bad escape or character) is told.
		if p, err := url.Parse(u); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			errs = append(errs, fmt.Errorf("schema_registry.url %q is not a valid URL (%v); escape a %% in it as %%25, or move the password to schema_registry.password_file", secret.Redact(u), err))
		} else if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("schema_registry.url %q is not an http:// or https:// URL", secret.Redact(u)))
		}
	}
	if !slices.Contains(SubjectNameStrategies, c.SubjectNameStrategy) {
		errs = append(errs, fmt.Errorf("schema_registry.subject_name_strategy %q is not topic, record or topic_record", c.SubjectNameStrategy))
	}
	if c.UseLatestVersion && !c.NoAutoRegister {
		errs = append(errs, errors.New("schema_registry.use_latest_version needs auto_register false: a serializer that registers its schema writes with that schema, as Confluent's does"))
	}
	if c.Password != "" && c.Username == "" {
		errs = append(errs, errors.New("schema_registry has a password but no username"))
	}
	if _, err := c.TLS.Config(tlsKey); err != nil {
		errs = append(errs, err)
	}
	if c.RetryMin < 0 || c.RetryMax < c.RetryMin || c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("schema_registry retry %s..%s, timeout %s: need 0 <= min <= max and a timeout >= 0", c.RetryMin, c.RetryMax, c.RequestTimeout))
	}
	return errs
}

// maxCachedSchemas bounds each cache of the registry writer: schemas are
// few (a table's columns, an expanded payload's shape), but they are made
// from input. Past the bound a cache starts over.
const maxCachedSchemas = 1024

// schemaFormat is what one of Confluent's schema converters adds to the
// registry client they share (AbstractKafkaSchemaSerDe): the schema it
// derives from a Connect schema, and the record it writes with a
// registered one. Its methods are called from the router's goroutine.
type schemaFormat interface {
	// name names the format in errors: "Avro", "JSON Schema", "Protobuf".
	name() string
	// schemaType is the schemaType the schema is registered with.
	schemaType() sr.SchemaType
	// null reports whether v, of schema s, is written as a null record,
	// without a schema: each converter has its own rule.
	null(s *Schema, v any) bool
	// derive returns the schema text the converter registers for s.
	derive(s *Schema) (string, error)
	// parse prepares text, derived or the subject's latest, for writing
	// records; its error is the event's and is not retried.
	parse(text string, s *Schema) (any, error)
	// recordName is the name RecordNameStrategy gives the schema of s, a
	// required struct.
	recordName(s *Schema) string
	// encode writes v, of schema s, with the parsed schema: the message
	// indexes the wire format carries after the schema id (Protobuf's;
	// nil for the others), and the record's bytes.
	encode(parsed any, s *Schema, v any) (index []int, body []byte, err error)
}

// registrySerde writes keys and values as Confluent's schema converters
// do (AvroConverter, JsonSchemaConverter, ProtobufConverter): the schema
// derived from the Connect schema is registered in the Schema Registry,
// then the record is written in the Confluent wire format (magic byte 0,
// the schema id as 4 bytes big endian, the format's own bytes). What is
// common to the three (subjects, the registry's answers, waiting for it)
// is here; what differs is a [schemaFormat]. It is used from the
// router's one goroutine.
type registrySerde struct {
	cfg   RegistryConfig
	cl    *sr.Client
	log   *slog.Logger
	state func(error)
	// formats are the key's and the value's; nil for one the registry
	// does not write.
	formats [2]schemaFormat

	// ids are the registered schemas, by subject and schema text.
	ids map[subjectSchema]registered
	// last are the key's and the value's last Connect schema and its
	// text: the router builds a new Connect schema for every record, most
	// often equal to the one before, whose text need not be made again.
	last [2]struct {
		s    *Schema
		text string
	}
	// down is when the registry last stopped answering; zero while it
	// answers.
	down     time.Time
	lastWarn time.Time
}

type subjectSchema struct{ subject, schema string }

// registered is a schema's id and the schema records are written with:
// the one derived, or with use_latest_version the subject's latest, as
// its format parsed it.
type registered struct {
	id     int
	schema any
}

// NewRegistryClient is the Schema Registry client cfg describes, for the
// registry formats and for `outboxrelay check`.
func NewRegistryClient(cfg RegistryConfig) (*sr.Client, error) {
	cfg.setDefaults()
	tc, err := cfg.TLS.Config(tlsKey)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	opts := []sr.ClientOpt{
		sr.URLs(cfg.URLs...),
		sr.HTTPClient(&http.Client{Timeout: cfg.RequestTimeout, Transport: tr}),
		sr.UserAgent("outboxrelay"),
	}
	if cfg.Username != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry client: %w", err)
	}
	return cl, nil
}

// newRegistrySerde writes the key in format key and the value in format
// value; either may be nil.
func newRegistrySerde(cfg RegistryConfig, key, value schemaFormat) (*registrySerde, error) {
	cl, err := NewRegistryClient(cfg)
	if err != nil {
		return nil, err
	}
	return &registrySerde{cfg: cfg, cl: cl, log: slog.New(slog.DiscardHandler), state: func(error) {},
		formats: [2]schemaFormat{key, value}, ids: map[subjectSchema]registered{}}, nil
}

// newAvroSerde writes keys and values as Avro.
func newAvroSerde(cfg RegistryConfig) (*registrySerde, error) {
	return newRegistrySerde(cfg, avroFormat{}, avroFormat{})
}

// subject names the subject of a key or value schema on topic. The
// record strategies name it after a record, which only a required struct
// (an envelope) is: Confluent's RecordNameStrategy.getRecordName throws
// for any other schema, and so does this.
func (a *registrySerde) subject(f schemaFormat, topic string, isKey bool, s *Schema) (string, error) {
	switch a.cfg.SubjectNameStrategy {
	case SubjectRecord, SubjectTopicRecord:
		if s.Type != TypeStruct || s.Optional {
			return "", fmt.Errorf("subject_name_strategy %s names the subject after a record, and this schema is not one (only envelope fields make the value a record)", a.cfg.SubjectNameStrategy)
		}
		if a.cfg.SubjectNameStrategy == SubjectRecord {
			return f.recordName(s), nil
		}
		return topic + "-" + f.recordName(s), nil
	}
	if isKey {
		return topic + "-key", nil
	}
	return topic + "-value", nil
}

// encode writes v, of Connect schema s, for topic. A value its format
// writes as a null record registers nothing.
func (a *registrySerde) encode(ctx context.Context, topic string, isKey bool, s *Schema, v any) ([]byte, error) {
	i := 1
	if isKey {
		i = 0
	}
	f := a.formats[i]
	if f.null(s, v) {
		return nil, nil
	}
	if s == nil {
		return nil, fmt.Errorf("a value without a schema cannot be written as %s", f.name())
	}
	last := &a.last[i]
	text := last.text
	if !s.equal(last.s) {
		var err error
		if text, err = f.derive(s); err != nil {
			return nil, err
		}
		last.s, last.text = s, text
	}
	subject, err := a.subject(f, topic, isKey, s)
	if err != nil {
		return nil, err
	}
	reg, err := a.lookup(ctx, f, s, subject, text)
	if err != nil {
		return nil, err
	}
	index, body, err := f.encode(reg.schema, s, v)
	if err != nil {
		return nil, fmt.Errorf("encode with schema %d of subject %q: %w", reg.id, subject, err)
	}
	var h sr.ConfluentHeader
	b, _ := h.AppendEncode(make([]byte, 0, 16+len(body)), reg.id, index)
	return append(b, body...), nil
}

// lookup returns the id of the schema text under subject, registering it
// (or, with NoAutoRegister, looking it up) the first time. While the
// registry does not answer it tries again with backoff, without end: no
// record goes out without its schema, and what waits behind it waits in
// order. It returns early only when ctx ends, with an [errNotEvent].
func (a *registrySerde) lookup(ctx context.Context, f schemaFormat, s *Schema, subject, text string) (registered, error) {
	key := subjectSchema{subject, text}
	if r, ok := a.ids[key]; ok {
		return r, nil
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = a.cfg.RetryMin, a.cfg.RetryMax, 0
	bo.Reset()
	for attempt := 1; ; attempt++ {
		r, err := a.call(ctx, f, s, subject, text)
		if err != nil && ctx.Err() != nil {
			// The relay is stopping; the request was cut short, which
			// says nothing about the registry.
			return registered{}, errNotEvent{fmt.Errorf("stopped while waiting for the schema registry (subject %q): %w", subject, context.Cause(ctx))}
		}
		if err == nil {
			if !a.down.IsZero() {
				a.log.Info("schema registry answers again; publishing goes on", "subject", subject, "down_for", time.Since(a.down).Round(time.Millisecond))
				a.down = time.Time{}
			}
			a.state(nil)
			if len(a.ids) >= maxCachedSchemas {
				clear(a.ids)
			}
			a.ids[key] = r
			return r, nil
		}
		if !retryable(err) {
			a.state(nil) // it answered
			return registered{}, classify(subject, err)
		}
		if a.down.IsZero() {
			a.down = time.Now()
		}
		a.state(err)
		wait := bo.NextBackOff()
		if time.Since(a.lastWarn) >= 30*time.Second || attempt == 1 {
			a.lastWarn = time.Now()
			a.log.Warn("schema registry unreachable; no record is published without its schema, so publishing waits and tries again",
				"subject", subject, "attempt", attempt, "down_for", time.Since(a.down).Round(time.Millisecond), "retry_in", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return registered{}, errNotEvent{fmt.Errorf("schema registry unreachable for subject %q when the relay stopped: %w", subject, err)}
		case <-time.After(wait):
		}
	}
}

// call makes one request: register, look up, or fetch the latest. The
// derived schema is parsed before it is sent, so that one the format
// refuses (a JSON key that is no Avro name, say) is this event's error,
// as under Confluent's converter, and is not registered.
func (a *registrySerde) call(ctx context.Context, f schemaFormat, s *Schema, subject, text string) (registered, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	parse := func(text string) (any, error) {
		parsed, err := f.parse(text, s)
		if err != nil {
			return nil, errNotRetryable{fmt.Errorf("the %s schema for subject %q is not valid %s: %w", f.name(), subject, f.name(), err)}
		}
		return parsed, nil
	}
	if a.cfg.UseLatestVersion {
		ss, err := a.cl.SchemaByVersion(ctx, subject, -1)
		if err != nil {
			return registered{}, err
		}
		parsed, err := parse(ss.Schema.Schema)
		return registered{id: ss.ID, schema: parsed}, err
	}
	parsed, err := parse(text)
	if err != nil {
		return registered{}, err
	}
	schema := sr.Schema{Schema: text, Type: f.schemaType()}
	var id int
	if a.cfg.NoAutoRegister {
		var ss sr.SubjectSchema
		ss, err = a.cl.LookupSchema(ctx, subject, schema)
		id = ss.ID
	} else {
		id, err = a.cl.RegisterSchema(ctx, subject, schema, -1, -1)
	}
	if err != nil {
		return registered{}, err
	}
	return registered{id: id, schema: parsed}, nil
}

// errNotRetryable is a failure that asking again cannot fix.
type errNotRetryable struct{ error }

func (e errNotRetryable) Unwrap() error { return e.error }

// errNotEvent is an error routing returns as it is, not as the event's
// own: the relay stopping, or a registry that refuses the relay.
type errNotEvent struct{ error }

func (e errNotEvent) Unwrap() error { return e.error }

// retryable reports whether err may pass by asking again: no answer, or
// an answer that says the registry is not itself (5xx, 408, 429).
func retryable(err error) bool {
	var nr errNotRetryable
	if errors.As(err, &nr) {
		return false
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusRequestTimeout || re.StatusCode == http.StatusTooManyRequests
	}
	return true
}

// classify turns a registry's refusal into the error the relay reports: a
// refused login stops the relay (every record would fail alike); a schema
// refused is this event's error, which a dead letter topic takes.
func classify(subject string, err error) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Message
	if msg == "" {
		msg = string(re.Raw)
	}
	switch {
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		return errNotEvent{connector.Permanent(fmt.Errorf("schema registry refused the relay (HTTP %d) for subject %q: %s; check schema_registry.username and password_file (basic.auth.user.info)", re.StatusCode, subject, msg))}
	case re.StatusCode == http.StatusConflict:
		return fmt.Errorf("schema registry refused the schema for subject %q as incompatible with the subject's earlier schemas (HTTP 409, error %d): %s; change the subject's compatibility level or make the schema compatible", subject, re.ErrorCode, msg)
	case re.StatusCode == http.StatusUnprocessableEntity:
		return fmt.Errorf("schema registry refused the schema for subject %q as invalid (HTTP 422, error %d): %s", subject, re.ErrorCode, msg)
	case re.ErrorCode == sr.ErrSubjectNotFound.Code || re.ErrorCode == sr.ErrSchemaNotFound.Code || re.ErrorCode == sr.ErrVersionNotFound.Code:
		return fmt.Errorf("schema is not registered under subject %q (error %d: %s), and schema_registry.auto_register is false: register it, or turn auto_register on", subject, re.ErrorCode, msg)
	}
	// Any other answer (404 without a registry's error code, 400, 405)
	// is not about this event's schema: most likely the URL is not the
	// registry's base URL, and every event would meet it.
	return errNotEvent{connector.Permanent(fmt.Errorf("schema registry answered %s %s with HTTP %d (error %d): %s; check that schema_registry.url is the registry's base URL (for Apicurio, its /apis/ccompat/v7)", re.Method, secret.Redact(re.URL), re.StatusCode, re.ErrorCode, msg))}
}
