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
	for _, tc := range []struct {
		name string
		last CheckpointTxn
		want string
	}{
		{"no last transaction known", CheckpointTxn{}, `"version":2`},
		{"a last transaction", CheckpointTxn{Xid: 4242, CommitLSN: 0x16_B374D800, EndLSN: 0x16_B374D830, CommitTime: time.Date(2026, 11, 24, 6, 59, 59, 999000, time.UTC)},
			`"last_txn":{"xid":4242,"commit_lsn":"16/B374D800","end_lsn":"16/B374D830","commit_time":"2026-11-24T06:59:59.000999Z"}`},
		{"none since a position", CheckpointTxn{EndLSN: 0x16_B0000000}, `"last_txn":{"xid":0,"end_lsn":"16/B0000000"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := cp
			cp.LastTxn = tc.last
			b, err := EncodeCheckpoint(cp)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"end_lsn":"16/B374D848"`) || !strings.Contains(string(b), tc.want) {
				t.Fatalf("encoded %s: want end_lsn 16/B374D848 and %s", b, tc.want)
			}
			if !tc.last.Known() && strings.Contains(string(b), "last_txn") {
				t.Fatalf("encoded %s: want no last_txn", b)
			}
			got, err := DecodeCheckpoint(key, b)
			if err != nil {
				t.Fatal(err)
			}
			if got != cp {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, cp)
			}
		})
	}
}

// A version 1 checkpoint, written before last_txn, still reads: without
// the proof, as the relay judged it then.
func TestDecodeCheckpointVersion1(t *testing.T) {
	key := CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	cp, err := DecodeCheckpoint(key, []byte(`{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/1A0","commit_time":"2026-11-24T07:00:00Z","last_event_id":"e1","events":3,"relay_version":"v1.0.0","written":"2026-11-24T07:00:01Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if cp.EndLSN != 0x1A0 || cp.Events != 3 || cp.LastTxn.Known() {
		t.Fatalf("decoded %+v; want end_lsn 0/1A0, 3 events and no last transaction", cp)
	}
}

func TestDecodeCheckpointRejects(t *testing.T) {
	key := CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	for _, tc := range []struct {
		name, value, want string
	}{
		{"not json", `garbage`, "not JSON"},
		{"no version", `{"end_lsn":"0/1"}`, `no "version" field`},
		{"future version", `{"version":3,"whatever":true}`, "version 3 was written by a newer relay"},
		{"zero version", `{"version":0}`, "version 0 is not a valid"},
		{"unknown field", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/1","surprise":1}`, "unknown field"},
		{"other cluster", `{"version":1,"system_identifier":"2","database":"app","slot":"s","end_lsn":"0/1"}`, `system_identifier "2"`},
		{"other slot", `{"version":1,"system_identifier":"1","database":"app","slot":"t","end_lsn":"0/1"}`, `slot "t"`},
		{"bad lsn", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"nope"}`, "end_lsn"},
		{"negative events", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/1","events":-1}`, "negative"},
		{"last_txn in version 1", `{"version":1,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":0,"end_lsn":"0/10"}}`, "has no last_txn"},
		{"last_txn after the checkpoint", `{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":0,"end_lsn":"0/20"}}`, "after the checkpoint's 0/10"},
		{"last_txn at 0/0", `{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":0,"end_lsn":"0/0"}}`, "not a position"},
		{"last_txn without a commit time", `{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":7,"commit_lsn":"0/8","end_lsn":"0/10"}}`, "no commit_time"},
		{"last_txn commit after its end", `{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":7,"commit_lsn":"0/10","end_lsn":"0/10","commit_time":"2026-11-24T07:00:00Z"}}`, "not before end_lsn"},
		{"no transaction, with a commit", `{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":0,"commit_lsn":"0/8","end_lsn":"0/10"}}`, "xid 0"},
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
	f.Add([]byte(`{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","last_txn":{"xid":7,"commit_lsn":"0/8","end_lsn":"0/10","commit_time":"2026-11-24T07:00:00Z"}}`))
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
