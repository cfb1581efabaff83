package cdc

import (
	"strings"
	"testing"
)

func TestBackfillCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    recovery
		mode string
		want string
	}{
		{name: "insert-time column", mode: "--after-checkpoint",
			r:    recovery{BackfillAdvice: BackfillAdvice{ConfigFlags: "--config /etc/outboxrelay/relay.yaml"}, flags: "--timestamp-column created_at", why: "w", known: true},
			want: "`outboxrelay backfill --after-checkpoint --timestamp-column created_at --config /etc/outboxrelay/relay.yaml` with the relay's environment (w)"},
		{name: "commit timestamps, environment alone", mode: "--after-checkpoint",
			r:    recovery{why: "w", known: true},
			want: "`outboxrelay backfill --after-checkpoint` with the relay's environment (w)"},
		{name: "every row replaces the mode", mode: "--since 2026-11-25T10:00:00Z",
			r:    recovery{BackfillAdvice: BackfillAdvice{ConfigFlags: "--config r.yaml"}, flags: "--all", why: "w", known: true},
			want: "`outboxrelay backfill --all --config r.yaml` with the relay's environment (w)"},
		{name: "catalog unread", mode: "--after-checkpoint",
			r:    recovery{BackfillAdvice: BackfillAdvice{ConfigFlags: "--config r.yaml"}},
			want: "`outboxrelay backfill --after-checkpoint --config r.yaml` with the relay's environment, adding --timestamp-column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Source{recovery: tc.r}
			if got := s.backfillCommand(tc.mode); !strings.HasPrefix(got, tc.want) {
				t.Errorf("backfillCommand(%q) = %q, want it to start %q", tc.mode, got, tc.want)
			}
		})
	}
}

func TestBackfillShellWord(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain path", "/etc/outboxrelay/relay.yaml", "/etc/outboxrelay/relay.yaml"},
		{"space", "my relay.yaml", "'my relay.yaml'"},
		{"quote", "it's.yaml", `'it'\''s.yaml'`},
		{"empty", "", "''"},
		{"dollar", "$HOME/r.yaml", "'$HOME/r.yaml'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shellWord(tc.in); got != tc.want {
				t.Errorf("shellWord(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
