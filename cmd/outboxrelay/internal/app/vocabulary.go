package app

import (
	"fmt"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

// vocabulary makes the JSON log say what the text log says: a duration
// as Go writes it ("30s", not 30000000000 nanoseconds) and a value that
// has its own written form (a position as PostgreSQL writes it,
// "0/1D4B718", not its number) in that form, so that one product speaks
// one language whichever format a pipeline reads. Errors keep slog's own
// handling.
func vocabulary(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			return a
		case fmt.Stringer:
			return slog.String(a.Key, v.String())
		}
	}
	return a
}

// clientLogger is the logger of a client library the relay opens (a Kafka
// client, say), under component: its chatter (connections, metadata,
// producer ids) is the library's own business, so below log.level debug
// only its warnings and errors pass.
func clientLogger(log *slog.Logger, level config.LogLevel, component string) *slog.Logger {
	if level != config.LevelDebug {
		log = slog.New(minLevel{Handler: log.Handler(), min: slog.LevelWarn})
	}
	return log.With("component", component)
}
