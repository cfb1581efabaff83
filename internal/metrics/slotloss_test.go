package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outboxrelay/outboxrelay/connector"
)

// lossSource is a source that lost its slot, as the CDC source reports it.
type lossSource struct {
	losses    map[string]int64
	stoppedBy string // "": not stopped
}

func (*lossSource) Run(ctx context.Context, _ chan<- connector.Batch) error { <-ctx.Done(); return nil }

func (s *lossSource) SlotLosses() int64 {
	var n int64
	for _, v := range s.losses {
		n += v
	}
	return n
}
func (s *lossSource) SlotLost() bool                      { return s.stoppedBy != "" }
func (s *lossSource) SlotLostCause() string               { return s.stoppedBy }
func (s *lossSource) SlotLossesByCause() map[string]int64 { return s.losses }

// The slot-loss metrics carry the cause: the counter one series a cause,
// every cause from 0, and the gauge the cause of the loss that stopped the
// relay, none while none did.
func TestSlotLossMetricsCarryTheCause(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  *lossSource
		want string
	}{
		{"no loss", &lossSource{losses: map[string]int64{"dropped": 0, "restored": 0}}, `
outboxrelay_replication_slot_losses_total{cause="dropped"} 0
outboxrelay_replication_slot_losses_total{cause="restored"} 0
outboxrelay_replication_slot_lost{cause=""} 0
`},
		{"stopped on a restore", &lossSource{losses: map[string]int64{"dropped": 0, "restored": 1}, stoppedBy: "restored"}, `
outboxrelay_replication_slot_losses_total{cause="dropped"} 0
outboxrelay_replication_slot_losses_total{cause="restored"} 1
outboxrelay_replication_slot_lost{cause="restored"} 1
`},
		{"went on past a dropped slot (recreate)", &lossSource{losses: map[string]int64{"dropped": 1, "restored": 0}}, `
outboxrelay_replication_slot_losses_total{cause="dropped"} 1
outboxrelay_replication_slot_losses_total{cause="restored"} 0
outboxrelay_replication_slot_lost{cause=""} 0
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(reg)
			if err != nil {
				t.Fatal(err)
			}
			m.ExportSource(tc.src)
			want := `
# HELP outboxrelay_replication_slot_losses_total ` + slotLossesHelp + `
# TYPE outboxrelay_replication_slot_losses_total counter
` + strings.SplitN(tc.want, "outboxrelay_replication_slot_lost{", 2)[0] + `# HELP outboxrelay_replication_slot_lost ` + slotLostHelp + `
# TYPE outboxrelay_replication_slot_lost gauge
outboxrelay_replication_slot_lost{` + strings.SplitN(tc.want, "outboxrelay_replication_slot_lost{", 2)[1]
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outboxrelay_replication_slot_losses_total", "outboxrelay_replication_slot_lost"); err != nil {
				t.Error(err)
			}
		})
	}
}
