package bench

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxrelay/outboxrelay/poller"
)

// Config is what one benchmark run measures.
type Config struct {
	// Events is the size of the backlog the drain relays. Default 300000.
	Events int
	// TxnMax makes the backlog's transactions 1 to TxnMax rows, uniformly.
	// Default 100.
	TxnMax int
	// PayloadBytes is the size of each event's JSON payload. Default 500.
	PayloadBytes int
	// Aggregates is how many aggregates the events belong to, spread over
	// four aggregate types (four topics). Default 10000.
	Aggregates int
	// Partitions is the partition count of every topic. Default 8.
	Partitions int
	// Writers is how many connections commit the backlog and the
	// steady-state load. Default 4.
	Writers int
	// Sources are the sources measured: "cdc", "cdc-eos", "cdc-avro" (two
	// CDC drains writing Debezium's records as JSON with schemas and as
	// Avro through a Schema Registry), "poll". Default cdc and poll. The
	// ceilings are measured whatever they are.
	Sources []string
	// Rates are the steady-state commit rates, events per second; none
	// skips the latency phase. Default 1000, 5000, 20000.
	Rates []int
	// RateDuration is how long each rate is held. Default 10s.
	RateDuration time.Duration
	// LatencyTxnRows is the rows per transaction at the steady rates.
	// Default 10.
	LatencyTxnRows int
	// RelayBin is the outboxrelay binary to measure. Default: built from
	// this module into a temporary directory, as docker/Dockerfile builds it
	// (static, CGO_ENABLED=0).
	RelayBin string
	// RelayLogDir, when set, keeps each relay process's output there as
	// <phase>.log (with GODEBUG=gctrace=1 in the environment, say).
	RelayLogDir string
	// BrokerProcess runs each kfake broker in a child process of its own
	// (this program re-executed as `outboxbench broker`), as a real broker
	// runs apart from the relay; its CPU is then measured from /proc.
	BrokerProcess bool
	// ProduceDelay holds every produce request this long before the
	// broker answers it, as a replicated cluster does while its followers
	// copy the records (acks=all): a few milliseconds in one zone, more
	// across zones. Default 0: kfake answers at once.
	ProduceDelay time.Duration
	// PGDelay puts a proxy between the relays and PostgreSQL that holds
	// every chunk of bytes this long in each direction, as a network
	// does: a round trip costs twice as much. Default 0: the relays
	// connect directly, over loopback.
	PGDelay time.Duration
	// WALDefaults leaves full_page_writes, max_wal_size and
	// checkpoint_timeout at the server's defaults, instead of the
	// benchmark's (off, 16GB, 1h), so that checkpoints and full-page
	// images come as they would in production.
	WALDefaults bool
	// PollMode is the pollers' poll.mode, mark or delete, and readies
	// their tables for it. Default mark, the relay's default.
	PollMode string
	// Neighbour is how many CPUs' worth of time a process beside the
	// relay burns while the drains and the steady rates are measured
	// (0.5: half a core), as a busy neighbour on a shared node does.
	// Default 0: none.
	Neighbour float64
	// RelayCPUs pins each relay to these CPUs, a list as taskset(1) takes
	// it ("0", "0-1"). Default: any CPU.
	RelayCPUs string
	relayCPUs []int
	// Seed picks the workload; the same seed gives the same events.
	// Default 1.
	Seed uint64
	// Tracing measures the relay's tracing: "headers" gives every event
	// a headers column holding a traceparent (routing.headers_column),
	// "otlp" also has the relays export a span for each event to an
	// OTLP/HTTP receiver in this process. Default "": neither.
	Tracing string
}

// DefaultRates are the steady-state rates when Config.Rates is nil.
var DefaultRates = []int{1000, 5000, 20000}

func (c *Config) SetDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Events, 300000)
	def(&c.TxnMax, 100)
	def(&c.PayloadBytes, 500)
	def(&c.Aggregates, 10000)
	def(&c.Partitions, 8)
	def(&c.Writers, 4)
	def(&c.LatencyTxnRows, 10)
	if c.Rates == nil {
		c.Rates = DefaultRates
	}
	if len(c.Sources) == 0 {
		c.Sources = []string{"cdc", "poll"}
	}
	if c.RateDuration == 0 {
		c.RateDuration = 10 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.PollMode == "" {
		c.PollMode = string(poller.ModeMark)
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %d must be positive", name, v))
		}
	}
	positive("events", c.Events)
	positive("txn-max", c.TxnMax)
	positive("aggregates", c.Aggregates)
	positive("partitions", c.Partitions)
	positive("writers", c.Writers)
	positive("latency-txn", c.LatencyTxnRows)
	if c.PayloadBytes < minPayload {
		errs = append(errs, fmt.Errorf("payload: %d bytes is too small; the JSON skeleton alone takes %d", c.PayloadBytes, minPayload))
	}
	for _, r := range c.Rates {
		positive("rates", r)
	}
	for _, src := range c.Sources {
		if src != "cdc" && src != "poll" && src != "cdc-eos" && src != "poll-eos" && src != formatsSource {
			errs = append(errs, fmt.Errorf("sources: %q is not cdc, cdc-eos, cdc-avro, poll or poll-eos", src))
		}
	}
	if c.Tracing != "" && c.Tracing != "headers" && c.Tracing != "otlp" {
		errs = append(errs, fmt.Errorf("tracing: %q is not headers or otlp", c.Tracing))
	}
	if c.PGDelay < 0 || c.ProduceDelay < 0 {
		errs = append(errs, errors.New("pg-delay, produce-delay: a delay cannot be negative"))
	}
	if m := poller.Mode(c.PollMode); m != poller.ModeMark && m != poller.ModeDelete {
		errs = append(errs, fmt.Errorf("poll-mode: %q is not %s or %s", c.PollMode, poller.ModeMark, poller.ModeDelete))
	}
	if c.Neighbour < 0 {
		errs = append(errs, fmt.Errorf("neighbour: %v CPUs cannot be negative", c.Neighbour))
	}
	if c.RelayCPUs != "" {
		cpus, err := parseCPUList(c.RelayCPUs)
		if err != nil {
			errs = append(errs, fmt.Errorf("relay-cpus: %w", err))
		}
		c.relayCPUs = cpus
	}
	if c.RateDuration <= 0 {
		errs = append(errs, fmt.Errorf("rate-duration: %s must be positive", c.RateDuration))
	}
	if c.Events >= 1<<40 {
		errs = append(errs, errors.New("events: too many to number in an event id"))
	}
	return errors.Join(errs...)
}

func (c *Config) measures(source string) bool { return slices.Contains(c.Sources, source) }
