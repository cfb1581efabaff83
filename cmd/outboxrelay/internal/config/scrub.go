package config

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// ScrubSecrets wraps h so that no secret reaches the log: each occurrence
// of one in the message or in any attribute (errors and other values
// included, as they print) becomes xxxxx. It is the last guard behind
// redacting at the source, for the error a library formats with a
// password in it. Empty secrets are ignored.
func ScrubSecrets(h slog.Handler, secrets []string) slog.Handler {
	var pairs []string
	for _, s := range secrets {
		if s != "" {
			pairs = append(pairs, s, redacted)
		}
	}
	if len(pairs) == 0 {
		return h
	}
	return &scrubHandler{h: h, r: strings.NewReplacer(pairs...)}
}

// scrub replaces every secret in s.
func scrub(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	return s
}

type scrubHandler struct {
	h slog.Handler
	r *strings.Replacer
}

func (s *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, s.r.Replace(r.Message), r.PC)
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
		return slog.String(a.Key, s.r.Replace(v.String()))
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
		if clean := s.r.Replace(text); clean != text {
			return slog.String(a.Key, clean)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
