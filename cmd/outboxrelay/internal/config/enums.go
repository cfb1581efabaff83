package config

// Source is where events come from (the source key).
type Source string

// What Source may be.
const (
	SourceCDC  Source = "cdc"
	SourcePoll Source = "poll"
)

// Values lists every Source.
func (Source) Values() []string { return []string{string(SourceCDC), string(SourcePoll)} }

// Delivery is what kafka.delivery promises.
type Delivery string

// What Delivery may be.
const (
	AtLeastOnce Delivery = "at_least_once"
	ExactlyOnce Delivery = "exactly_once"
)

// Values lists every Delivery.
func (Delivery) Values() []string { return []string{string(AtLeastOnce), string(ExactlyOnce)} }

// LogLevel is the least level logged (log.level).
type LogLevel string

// What LogLevel may be.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// Values lists every LogLevel.
func (LogLevel) Values() []string {
	return []string{string(LevelDebug), string(LevelInfo), string(LevelWarn), string(LevelError)}
}

// LogFormat is how a log line is written (log.format).
type LogFormat string

// What LogFormat may be.
const (
	FormatJSON LogFormat = "json"
	FormatText LogFormat = "text"
)

// Values lists every LogFormat.
func (LogFormat) Values() []string { return []string{string(FormatJSON), string(FormatText)} }

// enum is a key whose values are listed by its type; Reference lists them.
type enum interface{ Values() []string }
