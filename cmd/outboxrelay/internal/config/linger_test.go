package config

import (
	"testing"
	"time"
)

// TestKafkaLinger checks kafka.linger from the file and the environment,
// and its default of 0 (send at once).
func TestKafkaLinger(t *testing.T) {
	base := []string{"OUTBOXRELAY_POSTGRES_URL=postgres://u@h/db", "OUTBOXRELAY_KAFKA_BROKERS=b:9092"}
	for _, tc := range []struct {
		name string
		env  []string
		want time.Duration
	}{
		{"default", nil, 0},
		{"environment", []string{"OUTBOXRELAY_KAFKA_LINGER=5ms"}, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load("", append(base, tc.env...))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.SinkConfig().Linger; got != tc.want {
				t.Errorf("linger %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := Load("", append(base, "OUTBOXRELAY_KAFKA_LINGER=-1ms")); err == nil {
		t.Error("a negative linger was accepted")
	}
}
