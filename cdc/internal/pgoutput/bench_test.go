package pgoutput

import (
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/connector"
)

// BenchmarkDecodeInsert decodes one outbox row with a 500-byte payload, as
// the CDC source does for every event.
func BenchmarkDecodeInsert(b *testing.B) {
	rel := outboxRelation()
	rel.Columns = rel.Columns[:5]
	msg := insertMsg(16384, text("00000001-0000-4000-8000-000000000001"), text("order"), text("order-4711"),
		text("OrderCreated"), text(`{"id": 1, "note": "`+strings.Repeat("x", 470)+`"}`))
	var cols []connector.Column
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if cols, err = rel.DecodeInsert(msg, cols); err != nil {
			b.Fatal(err)
		}
	}
}
