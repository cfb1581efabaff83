package check

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/sink"
)

// CheckCheckpoint is what the checkpoint topic holds for the CDC relay.
const CheckCheckpoint = "checkpoint"

// checkCheckpoint reports what kafka.checkpoint_topic holds for this
// relay, named as the relay names itself (the cluster's system
// identifier, the database, the slot): its own checkpoint, with its
// position and age, and any other cluster's for the same database and
// slot names, with the verdict the relay would reach on it at start
// (cdc.Source.JudgeForeign).
func checkCheckpoint(ctx context.Context, r *Report, cfg *config.Config, sc sink.Config, o options) {
	if cfg.Source != "cdc" {
		return
	}
	// A step of its own: the read waits for a Kafka transaction open on
	// the partition to end.
	ctx, cancel := context.WithTimeout(ctx, o.timeout+10*time.Second)
	defer cancel()
	id, err := cdc.Identify(ctx, cfg.Postgres.URL, cfg.Postgres.Network())
	if err != nil {
		why := err.Error()
		if f, ok := pgsql.ExplainConnect(err); ok {
			why = f.Cause
		}
		r.skip(CheckCheckpoint, "not checked: the server, which names the relay's checkpoint, could not be identified on a replication connection: "+why)
		return
	}
	ccfg := cfg.CDCConfig()
	ccfg.SetDefaults()
	key := id.CheckpointKey(ccfg.Slot)
	topic := cfg.Kafka.CheckpointTopic
	if topic == "" {
		topic = sink.DefaultCheckpointTopic
	}
	own, found, foreign, err := sink.ReadCheckpoints(ctx, sc, topic, key)
	if err != nil {
		r.add(Fail, CheckCheckpoint, fmt.Sprintf("cannot read checkpoint topic %s: %v", topic, err),
			"the relay reads it at every start: grant its principal DESCRIBE and READ on the topic, or set kafka.checkpoint_topic to one it may read")
		return
	}
	now := time.Now()
	name := fmt.Sprintf("database %q, slot %q on cluster %s", key.Database, key.Slot, key.SystemID)
	switch {
	case found:
		detail := fmt.Sprintf("its own checkpoint in %s (%s): at %s, written %s ago, %d events", topic, name,
			pglogrepl.LSN(own.EndLSN), age(now, own.Written), own.Events)
		if len(foreign) > 0 {
			detail += fmt.Sprintf("; the topic also holds %s, which the relay ignores while it has its own", others(foreign, now))
		}
		r.pass(CheckCheckpoint, "%s", detail)
	case len(foreign) == 0:
		r.pass(CheckCheckpoint, "no checkpoint in %s for %s yet: the relay starts as a first start", topic, name)
	default:
		judgeForeign(ctx, r, cfg, ccfg, topic, name, foreign, now)
	}
}

// judgeForeign reports the other clusters' checkpoints in a topic that
// holds none of this relay's, each with the relay's verdict on it.
func judgeForeign(ctx context.Context, r *Report, cfg *config.Config, ccfg cdc.Config, topic, name string, foreign []connector.Checkpoint, now time.Time) {
	conn, err := pgsql.Connect(ctx, cfg.Postgres.URL, cfg.Postgres.Network())
	if err != nil {
		r.add(Warn, CheckCheckpoint, fmt.Sprintf("no checkpoint in %s for %s, but %s; they could not be judged: %v", topic, name, others(foreign, now), err),
			"run check again once PostgreSQL answers")
		return
	}
	defer pgsql.Close(ctx, conn)
	src, err := cdc.New(ccfg)
	if err != nil {
		r.skip(CheckCheckpoint, "not checked: "+err.Error())
		return
	}
	var verdicts []string
	worst := cdc.ForeignOther
	for _, cp := range foreign {
		f := src.JudgeForeign(ctx, conn, cp, now)
		verdicts = append(verdicts, fmt.Sprintf("cluster %s's (at %s, written %s ago): %s, since %s", cp.Key.SystemID, pglogrepl.LSN(cp.EndLSN), age(now, cp.Written), f.Verdict, f.Why))
		if f.Verdict == cdc.ForeignMoved || (f.Verdict == cdc.ForeignUnsure && worst == cdc.ForeignOther) {
			worst = f.Verdict
		}
	}
	detail := fmt.Sprintf("no checkpoint in %s for %s; it holds another cluster's for the same names: %s", topic, name, strings.Join(verdicts, "; "))
	switch worst {
	case cdc.ForeignOther:
		r.pass(CheckCheckpoint, "%s; the relay starts on its own", detail)
	case cdc.ForeignMoved:
		r.add(Fail, CheckCheckpoint, detail+"; the relay stops on a lost slot (cause \"another cluster\")",
			"this database was moved from that cluster: run outboxrelay backfill for the events committed there after its checkpoint, then start the relay (docs/runbooks.md#outboxrelayslotlost)")
	default:
		r.add(Fail, CheckCheckpoint, detail+"; the relay stops on a lost slot (cause \"another cluster\")",
			"if it is another relay's, give this one its own cdc.slot or kafka.checkpoint_topic; if this database was moved from there, run outboxrelay backfill, then start the relay (docs/runbooks.md#outboxrelayslotlost)")
	}
}

// others names the other clusters' checkpoints.
func others(foreign []connector.Checkpoint, now time.Time) string {
	var ids []string
	for _, cp := range foreign {
		ids = append(ids, fmt.Sprintf("%s (written %s ago)", cp.Key.SystemID, age(now, cp.Written)))
	}
	return "the checkpoints of other clusters with the same database and slot names: " + strings.Join(ids, ", ")
}

// age is how long before now t was, to the second; "?" when t is unknown.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return max(now.Sub(t), 0).Round(time.Second).String()
}
