package app

import (
	"context"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

// kafkaLogger is the logger for the Kafka client, whose info messages (every
// connection, every metadata refresh) would drown the relay's own: it logs
// at warn and above unless log.level is debug.
func kafkaLogger(log *slog.Logger, level config.LogLevel) *slog.Logger {
	if level != config.LevelDebug {
		log = slog.New(minLevel{Handler: log.Handler(), min: slog.LevelWarn})
	}
	return log.With("component", "kafka")
}

// minLevel drops records below min and passes the rest to Handler.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
