package app

import (
	"fmt"
	"log/slog"
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
