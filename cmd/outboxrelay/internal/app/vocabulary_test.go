package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

// TestLogVocabulary: both formats write a duration and a position alike,
// as Go and PostgreSQL write them.
func TestLogVocabulary(t *testing.T) {
	for _, format := range []config.LogFormat{config.FormatJSON, config.FormatText} {
		var b bytes.Buffer
		log := NewLogger(&b, "info", format)
		log.Info("m", "retry_in", 560*time.Millisecond, "shutdown_timeout", 30*time.Second,
			"from_lsn", pglogrepl.LSN(30717720), "err", errors.New("boom"))
		out := b.String()
		for _, want := range []string{"560ms", "30s", "0/1D4B718", "boom"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %q not in %s", format, want, out)
			}
		}
		if format == config.FormatJSON {
			var rec map[string]any
			if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"retry_in", "shutdown_timeout", "from_lsn"} {
				if _, ok := rec[k].(string); !ok {
					t.Errorf("json: %s is %T, want a string", k, rec[k])
				}
			}
		}
	}
}

// TestReportedDials: the checkpoint client's warning of a broker it could
// not dial is at debug, its other warnings stay, and at log.level debug
// the dial failure shows too.
func TestReportedDials(t *testing.T) {
	for _, level := range []config.LogLevel{config.LevelInfo, config.LevelDebug} {
		var b bytes.Buffer
		log := reportedDials(clientLogger(NewLogger(&b, level, config.FormatText), level, "kafka-checkpoint"))
		log.Warn(kafkaDialFailed, "addr", "127.0.0.1:1")
		log.Warn("bumping error count")
		out := b.String()
		if !strings.Contains(out, `level=WARN msg="bumping error count" component=kafka-checkpoint`) {
			t.Errorf("%s: the client's other warning is gone:\n%s", level, out)
		}
		if got, want := strings.Contains(out, kafkaDialFailed), level == config.LevelDebug; got != want {
			t.Errorf("%s: the dial failure shown: %t, want %t:\n%s", level, got, want, out)
		}
		if level == config.LevelDebug && !strings.Contains(out, `level=DEBUG msg="`+kafkaDialFailed+`"`) {
			t.Errorf("debug: the dial failure is not at DEBUG:\n%s", out)
		}
	}
}
