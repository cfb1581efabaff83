package sink

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is what a user sets for the Kafka producer.
//
// Its fields are keys of the kafka: section of the configuration file: a
// field's yaml and doc tags are its key and its text in
// docs/configuration.md, SetDefaults its default, Validate its checks.
// Fields tagged yaml:"-" are filled in from the section's security keys
// and from kafka.delivery.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string `yaml:"brokers" doc:"Seed brokers, host:port (in the environment: comma-separated)." default:"(required)"`
	// ClientID is the Kafka client id. Default "outboxrelay".
	ClientID string `yaml:"client_id" doc:"Kafka client id."`
	// Compression is none, gzip, snappy, lz4 or zstd. Default none, as the
	// Java producer.
	Compression Compression `yaml:"compression" doc:"Codec of the record batches produced."`
	// MaxBufferedRecords bounds the records published and not yet
	// acknowledged; a full buffer makes Publish wait. Default 1024: the
	// relay's heap is mostly these records and the produce request that
	// carries them, and the GC lets the heap grow to twice what is live
	// (Go's default GOGC of 100).
	// Draining 300k 500-byte events side by side on two cores at GOGC
	// 100, 4096 peaked at 46-48 MiB RSS (26-28 MiB of it the relay's own
	// memory), 1024 at 30 MiB (10-11 MiB), and both drained at or above
	// pg_recvlogical's rate (docs/performance.md, "Memory").
	MaxBufferedRecords int `yaml:"max_buffered_records" doc:"Most records in flight (published, not yet acknowledged); reading waits when full."`
	// MaxBufferedBytes bounds the bytes published and not yet acknowledged.
	// Default 32 MiB.
	MaxBufferedBytes int `yaml:"max_buffered_bytes" doc:"Most bytes in flight."`
	// Linger is how long a partition's batch waits for more records before
	// it is sent. Default 0: at once. Records that arrive while a request is
	// in flight (one at a time per broker, for the idempotent producer)
	// are batched all the same, so a backlog still goes in large requests;
	// a linger only delays sparse events. franz-go's own default, 10ms,
	// put 10ms into every event's latency at 1k-5k events/s
	// (p50 10.7/6.8 ms against 0.7/0.5 ms), for about a third less relay
	// CPU per event at those rates (outboxbench).
	Linger time.Duration `yaml:"linger" doc:"How long a batch waits for more records before it is sent; 0 sends at once (a backlog still goes in large batches)." default:"0s"`
	// MaxRecordBytes is the largest record the sink will produce. Default:
	// the broker's message.max.bytes, read when the sink starts.
	MaxRecordBytes int `yaml:"max_record_bytes" doc:"Largest record produced; larger events are errors (or dead letters)." default:"the broker's message.max.bytes"`
	// TopicCreation creates topics before their first record
	// (topics.go). Default off.
	TopicCreation TopicCreation `yaml:"topic_creation"`
	// TLS and SASL secure the connections to the brokers (security.go).
	// Default: plaintext, no authentication.
	TLS  TLS  `yaml:"-"`
	SASL SASL `yaml:"-"`
	// AllowPlaintextSASL lets SASL PLAIN send its password without TLS.
	// Default false: that combination is refused.
	AllowPlaintextSASL bool `yaml:"-"`
	// TransactionalID, when set, makes the sink publish in Kafka
	// transactions under this id (kafka.delivery exactly_once, txn.go).
	// Every instance of one relay uses the same id, so the one that takes
	// over fences the others. Default empty: no transactions.
	TransactionalID string `yaml:"-"`
	// TransactionTimeout is how long the broker lets a transaction stay
	// open before it aborts it: longer than any commit interval, short
	// enough that a relay frozen mid-transaction (SIGSTOP, a long GC
	// pause) does not hold read_committed consumers back for long. The
	// poller needs it shorter than the time after which PostgreSQL ends a
	// frozen instance's claim. Default 30s.
	TransactionTimeout time.Duration `yaml:"-"`
}

func (c *Config) SetDefaults() {
	if c.ClientID == "" {
		c.ClientID = "outboxrelay"
	}
	if c.Compression == "" {
		c.Compression = CompressionNone
	}
	if c.MaxBufferedRecords == 0 {
		c.MaxBufferedRecords = 1024
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = 32 << 20
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 30 * time.Second
	}
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka.brokers: at least one broker is required (host:port)"))
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			errs = append(errs, fmt.Errorf("kafka.brokers: %q has no port; write host:port", b))
		}
	}
	if _, err := compression(c.Compression); err != nil {
		errs = append(errs, err)
	}
	if c.MaxBufferedRecords < 0 {
		errs = append(errs, fmt.Errorf("kafka.max_buffered_records: %d is negative", c.MaxBufferedRecords))
	}
	if c.Linger < 0 {
		errs = append(errs, fmt.Errorf("kafka.linger: %s is negative", c.Linger))
	}
	if c.MaxBufferedBytes < 0 {
		errs = append(errs, fmt.Errorf("kafka.max_buffered_bytes: %d is negative", c.MaxBufferedBytes))
	}
	if c.MaxRecordBytes < 0 {
		errs = append(errs, fmt.Errorf("kafka.max_record_bytes: %d is negative", c.MaxRecordBytes))
	}
	if c.MaxRecordBytes > 0 && c.MaxBufferedBytes > 0 && c.MaxRecordBytes > c.MaxBufferedBytes {
		errs = append(errs, fmt.Errorf("kafka.max_record_bytes (%d) is larger than kafka.max_buffered_bytes (%d); such a record could never be buffered", c.MaxRecordBytes, c.MaxBufferedBytes))
	}
	if c.TransactionTimeout < time.Second {
		// The broker counts it in milliseconds, and refuses less than 1s.
		errs = append(errs, fmt.Errorf("kafka transaction timeout: %s is less than 1s", c.TransactionTimeout))
	}
	errs = append(errs, c.TopicCreation.Validate())
	errs = append(errs, c.validateSecurity()...)
	return errors.Join(errs...)
}

// Compression is the codec of the record batches the sink produces,
// written in any case.
type Compression string

// What Compression may be.
const (
	CompressionNone   Compression = "none"
	CompressionGzip   Compression = "gzip"
	CompressionSnappy Compression = "snappy"
	CompressionLz4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
)

// Values lists every Compression.
func (Compression) Values() []string {
	return []string{string(CompressionNone), string(CompressionGzip), string(CompressionSnappy), string(CompressionLz4), string(CompressionZstd)}
}

func compression(name Compression) (kgo.CompressionCodec, error) {
	switch strings.ToLower(string(name)) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("kafka.compression: %q is not one of none, gzip, snappy, lz4, zstd", name)
}
