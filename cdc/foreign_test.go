package cdc

import (
	"strings"
	"testing"
	"time"
)

// TestJudgeForeign: another cluster's checkpoint for this database and
// slot is this relay's past when its last event is a row here, another
// relay's when the table holds rows but not that one, or, where the table
// tells nothing, while its relay is writing it; otherwise neither can be
// told.
func TestJudgeForeign(t *testing.T) {
	const fresh = time.Minute
	for _, tc := range []struct {
		name string
		f    foreignFacts
		want ForeignVerdict
		why  string
	}{
		{"dump restored: the last event is a row here", foreignFacts{lastEvent: rowFound, detail: `id "e9" in public.outbox`, written: true, age: 3 * time.Hour},
			ForeignMoved, `its last event is a row here (id "e9" in public.outbox)`},
		{"blue/green switch: a row here, the old relay writing until a moment ago", foreignFacts{lastEvent: rowFound, detail: "x", written: true, age: time.Second},
			ForeignMoved, "a row here"},
		{"another relay: rows here, not that one", foreignFacts{lastEvent: rowAbsent, detail: "no id", written: true, age: 3 * time.Hour},
			ForeignOther, "its last event is no row here"},
		{"empty table, the other relay writing", foreignFacts{detail: "the outbox table holds no rows", written: true, age: 10 * time.Second},
			ForeignOther, "written 10s ago: its relay is running"},
		{"empty table, the other's clock ahead of this one's", foreignFacts{detail: "the outbox table holds no rows", written: true, age: -5 * time.Second},
			ForeignOther, "written 0s ago"},
		{"cleanup deletes the rows, the record an hour old", foreignFacts{detail: "cdc.cleanup deletes the rows it published", written: true, age: time.Hour},
			ForeignUnsure, "tells nothing here (cdc.cleanup deletes the rows it published), and it was written 1h0m0s ago"},
		{"just past fresh", foreignFacts{detail: "d", written: true, age: fresh},
			ForeignUnsure, "written 1m0s ago"},
		{"no last event, no time written", foreignFacts{detail: "the checkpoint names none"},
			ForeignUnsure, "does not say when it was written"},
		{"a failed lookup, fresh", foreignFacts{detail: "looking it up failed", written: true, age: time.Second},
			ForeignOther, "its relay is running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.freshFor = fresh
			v, why := judgeForeign(tc.f)
			if v != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("judgeForeign = %q, %q; want %q, saying %q", v, why, tc.want, tc.why)
			}
		})
	}
}
