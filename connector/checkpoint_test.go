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
	snap := TxnSnapshot{Xmin: 5<<32 | 4000, Xmax: 5<<32 | 4010, LSN: 0x16_B374D000, Timeline: 2,
		Taken: time.Date(2026, 11, 24, 6, 59, 59, 500000, time.UTC), ServerStart: time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name string
		last CheckpointTxn
		snap TxnSnapshot
		want string
	}{
		{"no last transaction known", CheckpointTxn{}, TxnSnapshot{}, `"version":3`},
		{"a transaction snapshot", CheckpointTxn{}, snap,
			`"txn_snapshot":{"xmin":"21474840480","xmax":"21474840490","lsn":"16/B374D000","timeline":2,"taken":"2026-11-24T06:59:59.0005Z","server_start":"2026-11-20T08:00:00Z"}`},
		{"a last transaction", CheckpointTxn{Xid: 4242, CommitLSN: 0x16_B374D800, EndLSN: 0x16_B374D830, CommitTime: time.Date(2026, 11, 24, 6, 59, 59, 999000, time.UTC)}, TxnSnapshot{},
			`"last_txn":{"xid":4242,"commit_lsn":"16/B374D800","end_lsn":"16/B374D830","commit_time":"2026-11-24T06:59:59.000999Z"}`},
		{"none since a position", CheckpointTxn{EndLSN: 0x16_B0000000}, TxnSnapshot{}, `"last_txn":{"xid":0,"end_lsn":"16/B0000000"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := cp
			cp.LastTxn, cp.TxnSnapshot = tc.last, tc.snap
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
			if !tc.snap.Known() && strings.Contains(string(b), "txn_snapshot") {
				t.Fatalf("encoded %s: want no txn_snapshot", b)
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

// A version 2 checkpoint, written before txn_snapshot, still reads,
// without a snapshot: a backfill after it chooses rows by time.
func TestDecodeCheckpointVersion2(t *testing.T) {
	key := CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	cp, err := DecodeCheckpoint(key, []byte(`{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","commit_time":"2026-11-24T07:00:00Z","last_event_id":"e1","events":3,"relay_version":"v1.0.0","written":"2026-11-24T07:00:01Z","last_txn":{"xid":0,"end_lsn":"0/10"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cp.EndLSN != 0x10 || !cp.LastTxn.Known() || cp.TxnSnapshot.Known() {
		t.Fatalf("decoded %+v; want end_lsn 0/10, the last transaction and no snapshot", cp)
	}
}

func TestDecodeCheckpointRejects(t *testing.T) {
	key := CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	for _, tc := range []struct {
		name, value, want string
	}{
		{"not json", `garbage`, "not JSON"},
		{"no version", `{"end_lsn":"0/1"}`, `no "version" field`},
		{"future version", `{"version":4,"whatever":true}`, "version 4 was written by a newer relay"},
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
		{"txn_snapshot in version 2", `{"version":2,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","txn_snapshot":` + snapJSON("0/8") + `}`, "has no txn_snapshot"},
		{"txn_snapshot after the checkpoint", `{"version":3,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","txn_snapshot":` + snapJSON("0/20") + `}`, "after the checkpoint's 0/10"},
		{"txn_snapshot with xmin past xmax", `{"version":3,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","txn_snapshot":{"xmin":"9","xmax":"8","lsn":"0/8","timeline":1,"taken":"2026-11-24T07:00:00Z","server_start":"2026-11-24T06:00:00Z"}}`, "not a snapshot's bounds"},
		{"txn_snapshot without its server", `{"version":3,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","txn_snapshot":{"xmin":"7","xmax":"8","lsn":"0/8","timeline":1,"taken":"2026-11-24T07:00:00Z"}}`, "server_start is missing"},
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

// snapJSON is a valid txn_snapshot at lsn.
func snapJSON(lsn string) string {
	return `{"xmin":"7","xmax":"9","lsn":"` + lsn + `","timeline":1,"taken":"2026-11-24T07:00:00Z","server_start":"2026-11-24T06:00:00Z"}`
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
	f.Add([]byte(`{"version":3,"system_identifier":"1","database":"app","slot":"s","end_lsn":"0/10","txn_snapshot":` + snapJSON("0/8") + `}`))
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
