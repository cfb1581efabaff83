package cdc

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/connector"
)

func TestJudgeSlot(t *testing.T) {
	self := connector.CheckpointKey{SystemID: "100", Database: "app", Slot: "s"}
	at := func(lsn uint64) *connector.Checkpoint { return &connector.Checkpoint{Key: self, EndLSN: lsn} }
	foreign := &connector.Checkpoint{Key: connector.CheckpointKey{SystemID: "200", Database: "app", Slot: "s"}, EndLSN: 50}
	for _, tc := range []struct {
		name    string
		slot    slotState
		known   *connector.Checkpoint
		verdict verdict
		cause   SlotLossCause
	}{
		{"first start", slotState{}, nil, createSlot, ""},
		{"slot made before the relay ran, or by init", slotState{exists: true, confirmed: 10}, nil, useSlot, ""},
		{"slot at the checkpoint", slotState{exists: true, confirmed: 50}, at(50), useSlot, ""},
		{"slot behind the checkpoint", slotState{exists: true, confirmed: 40}, at(50), useSlot, ""},
		{"slot behind, the server's WAL past the checkpoint", slotState{exists: true, confirmed: 40, wal: 70}, at(50), useSlot, ""},
		{"the server's WAL before the checkpoint: restored from a backup", slotState{exists: true, confirmed: 30, wal: 45}, at(50), slotLost, CauseBehind},
		{"slot dropped", slotState{}, at(50), slotLost, CauseDropped},
		{"slot ahead: recreated or advanced by someone else", slotState{exists: true, confirmed: 60}, at(50), slotLost, CauseAhead},
		{"invalidated with a checkpoint", slotState{exists: true, lost: true, confirmed: 40}, at(50), slotLost, CauseInvalidated},
		{"invalidated without one", slotState{exists: true, lost: true}, nil, slotLost, CauseInvalidated},
		{"another cluster's checkpoint, no slot", slotState{}, foreign, slotLost, CauseForeign},
		{"another cluster's checkpoint, a slot", slotState{exists: true, confirmed: 10}, foreign, slotLost, CauseForeign},
		{"slot behind, WAL past the checkpoint, replayed: the same history", slotState{exists: true, confirmed: 40, wal: 70}, at(50), useSlot, ""},
		{"slot behind, WAL past the checkpoint, replayed: another history", slotState{exists: true, confirmed: 40, wal: 70, historyDiffers: true}, at(50), slotLost, CauseRestored},
		{"another history, but the WAL short of the checkpoint: behind says more", slotState{exists: true, confirmed: 40, wal: 45, historyDiffers: true}, at(50), slotLost, CauseBehind},
		{"another history of another cluster's checkpoint", slotState{exists: true, confirmed: 40, wal: 70, historyDiffers: true}, foreign, slotLost, CauseForeign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, cause := judge(tc.slot, tc.known, self)
			if v != tc.verdict || cause != tc.cause {
				t.Fatalf("judge = %v, %q; want %v, %q", v, cause, tc.verdict, tc.cause)
			}
		})
	}
}
