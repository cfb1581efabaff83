package connector

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckpointRoundTrip(t *testing.T) {
	key := CheckpointKey{SystemID: "7312345678901234567", Database: "app", Slot: "outboxrelay"}
	cp := Checkpoint{
		Key:          key,
		EndLSN:       0x16_B374D848,
		CommitTime:   time.Date(2026, 11, 24, 7, 0, 0, 123000, time.UTC),
		Timeline:     1,
		LastEventID:  "0190-abc",
		Events:       42,
		RelayVersion: "v1.2.3",
		Written:      time.Date(2026, 11, 24, 7, 0, 1, 0, time.UTC),
	}
	b, err := EncodeCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"version":1`) || !strings.Contains(string(b), `"end_lsn":"16/B374D848"`) {
		t.Fatalf("encoded %s: want version 1 and end_lsn 16/B374D848", b)
	}
	got, err := DecodeCheckpoint(key, b)
	if err != nil {
		t.Fatal(err)
	}
	if got != cp {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, cp)
	}
}

func TestDecodeCheckpointRejects(t *testing.T) {
	key := CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	for _, tc := range []struct {
		name, value, want string
	}{
		{"not json", `garbage`, "not JSON"},
		{"no version", `{"end_lsn":"0/1"}`, `no "version" field`},
		{"future version", `{"version":2,"whatever":true}`, "version 2 was written by a newer relay"},
		{"zero version", `{"version":0}`, "version 0 is not a valid"},
		{"unknown field", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/1","surprise":1}`, "unknown field"},
		{"other cluster", `{"version":1,"system_identifier":"2","database":"app","slot":"s","end_lsn":"0/1"}`, `system_identifier "2"`},
		{"other slot", `{"version":1,"system_identifier":"1","database":"app","slot":"t","end_lsn":"0/1"}`, `slot "t"`},
		{"bad lsn", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"nope"}`, "end_lsn"},
		{"negative events", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/1","events":-1}`, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCheckpoint(key, []byte(tc.value))
			if !errors.Is(err, ErrCheckpointUnreadable) {
				t.Fatalf("err = %v, want ErrCheckpointUnreadable", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), key.String()) {
				t.Fatalf("err = %q, want it to contain %q and the key %s", err, tc.want, key)
			}
		})
	}
}

func TestCheckpointKeyString(t *testing.T) {
	a := CheckpointKey{SystemID: "1", Database: "a/b", Slot: "c"}
	b := CheckpointKey{SystemID: "1", Database: "a", Slot: "b/c"}
	if a.String() == b.String() {
		t.Fatalf("keys %+v and %+v collide as %q", a, b, a.String())
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add([]byte(`{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/1"}`))
	f.Add([]byte(`{"version":9}`))
	key := CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := DecodeCheckpoint(key, b)
		if err != nil {
			if !errors.Is(err, ErrCheckpointUnreadable) {
				t.Fatalf("error without ErrCheckpointUnreadable: %v", err)
			}
			return
		}
		if cp.Key != key {
			t.Fatalf("decoded a foreign key %+v", cp.Key)
		}
	})
}
