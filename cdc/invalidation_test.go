package cdc

import (
	"strings"
	"testing"
)

// Each reason PostgreSQL gives for invalidating a slot is told apart in
// the error, naming the setting to change.
func TestInvalidationWhy(t *testing.T) {
	for reason, setting := range map[string]string{
		InvalidationWALRemoved:  "max_slot_wal_keep_size",
		InvalidationIdleTimeout: "idle_replication_slot_timeout",
		InvalidationRowsRemoved: "hot_standby_feedback",
		InvalidationWALLevel:    "wal_level = logical",
		invalidationOnStandby16: "PostgreSQL 16 does not say which",
		"":                      "wal_status lost",
		"some_new_reason":       "invalidation_reason some_new_reason",
	} {
		if why := invalidationWhy(reason); !strings.Contains(why, setting) {
			t.Errorf("reason %q: %q does not name %q", reason, why, setting)
		}
	}
}
