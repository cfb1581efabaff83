package app

import (
	"context"
	"log/slog"
)

// kafkaDialFailed is the Kafka client's warning of a broker it could not
// dial (franz-go's broker.go).
const kafkaDialFailed = "unable to open connection to broker"

// reportedDials is the logger of a Kafka client whose every request's
// failure reaches the relay: the checkpoint store's, whose errors stop or
// restart the source. A broker it cannot dial the relay names itself, with
// the brokers, once per retry (connector.ConnectError), so the client's
// own warning of it is lowered to debug rather than said twice. The
// producer's client keeps it: a produce retries inside the client, and
// that warning is then the only word of a broker gone.
func reportedDials(l *slog.Logger) *slog.Logger { return slog.New(dialsAtDebug{l.Handler()}) }

type dialsAtDebug struct{ slog.Handler }

func (h dialsAtDebug) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && r.Message == kafkaDialFailed {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h dialsAtDebug) WithAttrs(as []slog.Attr) slog.Handler {
	return dialsAtDebug{h.Handler.WithAttrs(as)}
}

func (h dialsAtDebug) WithGroup(name string) slog.Handler {
	return dialsAtDebug{h.Handler.WithGroup(name)}
}
