package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// A checkpoint another cluster (another system_identifier) saved for this
// database and slot, when the relay has none of its own, is one of two
// things that call for opposite answers:
//
//   - the relay's own past: its database now runs in a new cluster (a
//     pg_upgrade, a dump restored, a blue/green switch). The outbox table
//     came along, with the rows the old cluster's relay published, and a
//     slot made here starts after a gap: the slot is lost (CauseForeign).
//   - another relay's: an unrelated cluster whose database and slot have
//     the same names (the defaults, app and outboxrelay) keeps its
//     checkpoints in the same topic. Nothing of this relay's: it says so
//     once and goes on as on a first start.
//
// judgeForeign tells them apart by what this database holds of the
// checkpoint's last event, and, where that says nothing, by how fresh
// the record is.

// ForeignVerdict is what a checkpoint another cluster saved for this
// relay's database and slot names means for it.
type ForeignVerdict string

// The verdicts judgeForeign gives.
const (
	// ForeignMoved: this database was moved from that cluster, and the
	// checkpoint is the relay's own past: a lost slot.
	ForeignMoved ForeignVerdict = "moved from that cluster"
	// ForeignOther: another relay's, of a cluster whose names are the
	// same; ignored.
	ForeignOther ForeignVerdict = "another relay's"
	// ForeignUnsure: neither can be told; a lost slot, whose error says
	// both and the fix for each.
	ForeignUnsure ForeignVerdict = "cannot tell"
)

// rowFinding is what this database holds of a foreign checkpoint's last
// event.
type rowFinding int

const (
	// rowUnknown: nothing to go by: the checkpoint names no event, the
	// tables hold no row (a table the application deletes from, or an
	// outbox of messages), cdc.cleanup deletes what is published, or the
	// lookup failed.
	rowUnknown rowFinding = iota
	// rowFound: the event is a row of an outbox table here.
	rowFound
	// rowAbsent: it is no row here, though the tables hold rows and
	// nothing of the relay's deletes them.
	rowAbsent
)

// foreignFacts are what judgeForeign goes by.
type foreignFacts struct {
	lastEvent rowFinding
	// detail says what the lookup found: the table holding the event,
	// or why it tells nothing.
	detail string
	// age is how long before the judgement the record was written; zero
	// or less when its clock is ahead of this one's.
	age time.Duration
	// freshFor is the age within which a running relay writes its
	// checkpoint again (foreignFreshFor).
	freshFor time.Duration
	// written: the record says when it was written.
	written bool
}

// judgeForeign is the verdict on another cluster's checkpoint, and why. A
// row here that the other relay published means the database came from
// there, whatever else holds; a table that holds rows but not that one
// means another database. Where the table says nothing, a record written
// within freshFor is a relay at work on its own cluster now, which a moved
// one is not; an older one could be either.
func judgeForeign(f foreignFacts) (ForeignVerdict, string) {
	switch {
	case f.lastEvent == rowFound:
		return ForeignMoved, "its last event is a row here (" + f.detail + ")"
	case f.lastEvent == rowAbsent:
		return ForeignOther, "its last event is no row here (" + f.detail + ")"
	case f.written && f.age < f.freshFor:
		return ForeignOther, fmt.Sprintf("its last event tells nothing here (%s), but it was written %s ago: its relay is running on its own cluster", f.detail, max(f.age, 0).Round(time.Second))
	case f.written:
		return ForeignUnsure, fmt.Sprintf("its last event tells nothing here (%s), and it was written %s ago", f.detail, f.age.Round(time.Second))
	}
	return ForeignUnsure, "its last event tells nothing here (" + f.detail + "), and it does not say when it was written"
}

// foreignFreshFor is the age within which a relay that is running writes
// its checkpoint again: every status interval while its server's WAL
// moves, at once for events. A cluster with no WAL at all for longer
// writes none, and is judged unsure.
func (s *Source) foreignFreshFor() time.Duration {
	return max(time.Minute, 6*s.cfg.StatusInterval)
}

// ForeignFinding is the verdict on one checkpoint another cluster saved.
type ForeignFinding struct {
	Checkpoint connector.Checkpoint
	Verdict    ForeignVerdict
	// Why says what the verdict goes by.
	Why string
}

// JudgeForeign judges cp, a checkpoint another cluster saved for this
// source's database and slot, against the outbox tables conn reads, as
// the source does when it starts and finds no checkpoint of its own.
// outboxrelay check calls it too.
func (s *Source) JudgeForeign(ctx context.Context, conn *pgx.Conn, cp connector.Checkpoint, now time.Time) ForeignFinding {
	f := s.lastEventHere(ctx, conn, cp.LastEventID)
	f.freshFor, f.written = s.foreignFreshFor(), !cp.Written.IsZero()
	if f.written {
		f.age = now.Sub(cp.Written)
	}
	v, why := judgeForeign(f)
	return ForeignFinding{Checkpoint: cp, Verdict: v, Why: why}
}

// lastEventHere looks id, a foreign checkpoint's last event, up in the
// outbox tables.
func (s *Source) lastEventHere(ctx context.Context, conn *pgx.Conn, id string) foreignFacts {
	if id == "" {
		return foreignFacts{detail: "the checkpoint names none"}
	}
	anyRows := false
	for _, t := range s.tables {
		var found, rows bool
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s = $1), EXISTS (SELECT 1 FROM %s)`,
			t.ident(), pgident.Quote(t.columns.ID), t.ident()), id).Scan(&found, &rows)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pgerrcode.IsDataException(pe.Code):
			// The id is no value of the column's type (not a uuid, a
			// number out of range): it is no row of this table.
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s)`, t.ident())).Scan(&rows); err != nil {
				return foreignFacts{detail: fmt.Sprintf("reading %s failed: %v", t, err)}
			}
		case err != nil:
			return foreignFacts{detail: fmt.Sprintf("looking id %q up in %s failed: %v", id, t, err)}
		case found:
			return foreignFacts{lastEvent: rowFound, detail: fmt.Sprintf("id %q in %s", id, t)}
		}
		anyRows = anyRows || rows
	}
	switch {
	case !anyRows:
		return foreignFacts{detail: "the outbox table holds no rows"}
	case s.cfg.Cleanup.Enabled:
		return foreignFacts{detail: "cdc.cleanup deletes the rows it published"}
	}
	return foreignFacts{lastEvent: rowAbsent, detail: fmt.Sprintf("no id %q in %s, which holds rows", id, s.tableList())}
}

// foreignCheckpoints is a store that keeps every other cluster's
// checkpoint for the same names its last Load found
// (sink.CheckpointStore).
type foreignCheckpoints interface {
	ForeignCheckpoints() []connector.Checkpoint
}

// settleForeign judges the checkpoint the source holds when another
// cluster wrote it, before the slot is judged: the store returns one when
// it holds none of this relay's (connector.CheckpointStore). Every other
// cluster's is judged, so that a third cluster's fresh record does not
// hide this one's past. When all are other relays', the source forgets
// the checkpoint, says so once, and goes on as on a first start; else it
// keeps the one that makes the slot lost, and what was found of it for
// reportLoss.
func (s *Source) settleForeign(ctx context.Context, conn *pgx.Conn) {
	cp, ok := s.Checkpoint()
	if !ok || cp.Key.SystemID == s.key().SystemID {
		return
	}
	all := []connector.Checkpoint{cp}
	if fs, ok := s.ckpt.store.(foreignCheckpoints); ok && len(fs.ForeignCheckpoints()) > 0 {
		all = fs.ForeignCheckpoints()
	}
	now := time.Now()
	var others []ForeignFinding
	for _, fc := range all {
		f := s.JudgeForeign(ctx, conn, fc, now)
		if f.Verdict != ForeignOther {
			if s.foreign == nil || f.Verdict == ForeignMoved {
				s.foreign = &f
			}
			continue
		}
		others = append(others, f)
	}
	if s.foreign != nil {
		s.setCurrent(&s.foreign.Checkpoint)
		return
	}
	s.setCurrent(nil)
	for _, f := range others {
		s.log.Info("the checkpoint topic also holds another cluster's checkpoint for the same database and slot names; it is another relay's, not this one's, so this relay starts on its own",
			"slot", s.cfg.Slot, "database", f.Checkpoint.Key.Database, "other_system_identifier", f.Checkpoint.Key.SystemID,
			"system_identifier", s.key().SystemID, "why", f.Why,
			"hint", "a cdc.slot or kafka.checkpoint_topic of its own keeps the two relays' checkpoints apart")
	}
}

// foreignLoss is the error, or with cdc.on_slot_loss recreate the ERROR,
// of a slot lost to another cluster's checkpoint (known), as found
// (s.foreign): short, since it says what to do for each explanation it
// cannot rule out.
func (s *Source) foreignLoss(known *connector.Checkpoint) error {
	f := ForeignFinding{Checkpoint: *known, Verdict: ForeignUnsure, Why: "it was not judged"}
	if s.foreign != nil {
		f = *s.foreign
	}
	head := fmt.Sprintf("the only checkpoint for database %q, slot %q is another cluster's (system_identifier %s; this one is %s): %s",
		known.Key.Database, s.cfg.Slot, known.Key.SystemID, s.key().SystemID, f.Why)
	after := pglogrepl.LSN(known.EndLSN).String()
	if !known.CommitTime.IsZero() {
		after += " (committed at " + known.CommitTime.UTC().Format(time.RFC3339Nano) + ")"
	}
	gap := fmt.Sprintf("events committed there after %s may never reach Kafka: stop the relay, run %s and start it, or start once with cdc.on_slot_loss: recreate (docs/runbooks.md#outboxrelayslotlost)",
		after, s.foreignBackfill())
	var msg string
	if f.Verdict == ForeignMoved {
		msg = head + ". This database was moved from there (pg_upgrade, a dump restored, a blue/green switch), so " + gap
	} else {
		msg = head + ". Another relay with these names? Give this one its own cdc.slot or kafka.checkpoint_topic. This database moved from there? Then " + gap
	}
	attrs := []any{"slot", s.cfg.Slot, "cause", string(CauseForeign), "verdict", string(f.Verdict), "checkpoint_lsn", pglogrepl.LSN(known.EndLSN).String()}
	if s.cfg.OnSlotLoss == SlotLossRecreate {
		s.log.Error(msg+"; cdc.on_slot_loss is recreate, so the relay goes on from the slot as it is and checkpoints there", attrs...)
		return nil
	}
	err := &SlotLostError{Slot: s.cfg.Slot, Cause: CauseForeign, msg: msg}
	s.log.Error("replication slot lost; relaying stopped", append(attrs, "err", msg)...)
	return connector.Permanent(err)
}

// foreignBackfill is the backfill command for the gap after a foreign
// checkpoint, without the reasons for its flags that the other causes'
// errors give (backfillCommand).
func (s *Source) foreignBackfill() string {
	r := s.recovery
	mode := "--after-checkpoint"
	if !r.known || r.flags == "--all" {
		mode = "--all"
	}
	flags := r.flags
	if flags == "--all" {
		flags = ""
	}
	return "`" + strings.Join(nonEmpty("outboxrelay backfill", mode, flags, r.ConfigFlags), " ") + "`"
}
