package config

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// ScrubSecrets wraps h so that no secret reaches the log: each occurrence
// of one in the message or in any attribute (errors and other values
// included, as they print) becomes xxxxx. It is the last guard behind
// redacting at the source, for the error a library formats with a
// password in it. Empty secrets are ignored.
func ScrubSecrets(h slog.Handler, secrets []string) slog.Handler {
	r := secret.NewScrubber(secrets)
	if r.Empty() {
		return h
	}
	return &scrubHandler{h: h, r: r}
}

type scrubHandler struct {
	h slog.Handler
	r secret.Scrubber
}

func (s *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, s.r.Scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(s.attr(a))
		return true
	})
	return s.h.Handle(ctx, out)
}

func (s *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = s.attr(a)
	}
	return &scrubHandler{h: s.h.WithAttrs(clean), r: s.r}
}

func (s *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{h: s.h.WithGroup(name), r: s.r}
}

func (s *scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, s.r.Scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, ga := range g {
			clean[i] = s.attr(ga)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		// Errors, Stringers and structs print through fmt in both
		// handlers; a value whose text holds a secret is logged as that
		// text, scrubbed, and any other value as it was.
		text := fmt.Sprint(v.Any())
		if clean := s.r.Scrub(text); clean != text {
			return slog.String(a.Key, clean)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
