package demo

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestDemo runs the demo as `outboxrelay demo` does: every sample event must
// be printed as a record of its topic, keyed by its aggregate, with its id
// header and payload, and an aggregate's events in commit order.
func TestDemo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, logs bytes.Buffer
	if err := Run(context.Background(), &out, &logs); err != nil {
		t.Fatalf("demo: %v\nlog:\n%s", err, logs.String())
	}
	rec := regexp.MustCompile(`topic=outbox\.event\.(\w+) partition=\d+ offset=\d+ key=(\S+) headers=\[id=[0-9a-f-]{36}\] timestamp=\S+\n  value=(.*)\n`)
	got := rec.FindAllStringSubmatch(out.String(), -1)
	var want int
	for _, txn := range samples {
		want += len(txn)
	}
	if len(got) != want {
		t.Fatalf("%d records printed, want %d:\n%s", len(got), want, out.String())
	}
	// Per aggregate, the payloads in the order the demo committed them.
	wantOrder := map[string][]string{}
	for _, txn := range samples {
		for _, s := range txn {
			wantOrder[s.aggType+"/"+s.aggID] = append(wantOrder[s.aggType+"/"+s.aggID], s.payload)
		}
	}
	gotOrder := map[string][]string{}
	for _, m := range got {
		gotOrder[m[1]+"/"+m[2]] = append(gotOrder[m[1]+"/"+m[2]], m[3])
	}
	for agg, payloads := range wantOrder {
		// jsonb prints keys in its own order; compare as sets of fields.
		if len(gotOrder[agg]) != len(payloads) {
			t.Errorf("aggregate %s: %d records, want %d", agg, len(gotOrder[agg]), len(payloads))
			continue
		}
		for i := range payloads {
			if fields(gotOrder[agg][i]) != fields(payloads[i]) {
				t.Errorf("aggregate %s, record %d: value %s, want %s", agg, i, gotOrder[agg][i], payloads[i])
			}
		}
	}
	if !strings.Contains(out.String(), "every committed event reached Kafka") {
		t.Errorf("no closing line:\n%s", out.String())
	}
	// The relay's log stays out of a demo that works: its records and a
	// few lines of its own are what a newcomer reads.
	if logs.Len() > 0 {
		t.Errorf("the demo wrote the relay's log around its records:\n%s", logs.String())
	}
}

// fields is a JSON object's fields, sorted, for comparing jsonb's output with
// its input.
func fields(obj string) string {
	parts := strings.Split(strings.Trim(obj, "{}"), ", ")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
