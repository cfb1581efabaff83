package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/poller"
)

// makeReaders reads the catalog of each table of the state and decides
// how its rows' commit times are told. bounds are a resumed replay's.
func (r *run) makeReaders(ctx context.Context, bounds []string) error {
	var track string
	if err := r.conn.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&track); err != nil {
		return classify("read track_commit_timestamp", err)
	}
	sel := r.job.Selection
	col := sel.TimestampColumn
	if col == "" {
		col = r.cfg.Routing.Debezium.TimestampColumn
	}
	poll := r.cfg.Source == config.SourcePoll
	ts := chooseTime(poll, track == "on", col)
	if sel.byRange() && ts == timeNone {
		return errNoCommitTime
	}
	r.res.TimeFrom = ts.words(col)
	r.readers = nil
	for i, name := range r.st.Tables {
		pc, err := r.pollConfig(name)
		if err != nil {
			return err
		}
		t, err := readTable(ctx, r.conn, name, r.cfg.ColumnsOf(name), pc)
		if err != nil {
			return err
		}
		if ts == timeColumn || ts == timeCommitOrColumn {
			if t.ts, err = readTimestampColumn(ctx, r.conn, t, col); err != nil {
				return err
			}
		}
		rd := &reader{t: t, ts: ts, sel: sel, until: r.st.Until}
		if i < len(bounds) {
			rd.bound = bounds[i]
		}
		r.readers = append(r.readers, rd)
	}
	return nil
}

// pollConfig is the poller's config of the outbox table name; nil for
// the CDC source. poll.mode delete is refused: it keeps no row once
// published.
func (r *run) pollConfig(name string) (*poller.Config, error) {
	if r.cfg.Source != config.SourcePoll {
		return nil, nil
	}
	q := qualifiedName(name)
	for _, pc := range r.cfg.PollConfigs() {
		if qualifiedName(pc.Table) != q {
			continue
		}
		pc.SetDefaults()
		if pc.Mode == poller.ModeDelete {
			return nil, fmt.Errorf("poll.mode is delete: the poller deletes each row of %s once Kafka has it, so the table holds only rows it has not published yet, and nothing can be replayed from it; poll.mode mark keeps them for poll.retention", q)
		}
		return &pc, nil
	}
	return nil, fmt.Errorf("outbox table %s is not polled by this configuration", q)
}

func qualifiedName(n string) string {
	s, t, err := pgsql.SplitTable(n)
	if err != nil {
		return n
	}
	return s + "." + t
}

// deletion is what deletes the rows the relay published, by the
// configuration; nil when nothing does.
func (r *run) deletion() *deletion {
	if r.cfg.Source == config.SourcePoll {
		pc := r.cfg.PollConfig()
		pc.SetDefaults()
		return &deletion{what: fmt.Sprintf("the poller's retention deletes rows published more than poll.retention (%s) ago", pc.Retention), retention: pc.Retention}
	}
	cc := r.cfg.CDCConfig()
	cc.SetDefaults()
	if !cc.Cleanup.Enabled {
		return nil
	}
	return &deletion{what: fmt.Sprintf("cdc.cleanup deletes the rows Kafka has once they are older than cdc.cleanup.retention (%s)", cc.Cleanup.Retention), retention: cc.Cleanup.Retention}
}

// choose fixes what a new replay publishes: each table's end as it is
// now, and the rows chosen up to it, refusing a selection that reaches
// rows already deleted unless the job allows it.
func (r *run) choose(ctx context.Context, now time.Time) error {
	d := r.deletion()
	if r.job.Selection.byIDs() {
		return r.chooseIDs(ctx, d)
	}
	r.st.Bounds = nil
	for _, rd := range r.readers {
		if err := rd.readBound(ctx, r.conn); err != nil {
			return err
		}
		r.st.Bounds = append(r.st.Bounds, rd.bound)
		if !r.job.Partial {
			if err := rd.checkRange(ctx, r.conn, d, now); err != nil {
				return err
			}
		}
		n, err := rd.count(ctx, r.conn, nil)
		if err != nil {
			return err
		}
		r.st.Chosen += n
		if err := r.warnUnknown(ctx, rd); err != nil {
			return err
		}
	}
	return nil
}

// warnUnknown says how many rows a range by commit times alone leaves
// out because the server does not know when they were committed.
func (r *run) warnUnknown(ctx context.Context, rd *reader) error {
	if rd.ts != timeCommit || !rd.sel.byRange() {
		return nil
	}
	var n int64
	if err := r.conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE pg_xact_commit_timestamp(xmin) IS NULL`, rd.t.ident)).Scan(&n); err != nil {
		return classify("count the rows without a commit time", err)
	}
	if n > 0 {
		r.log.Warn("rows whose commit time the server does not know are left out of the range; name their insert-time column with --timestamp-column to choose them by it",
			"table", rd.t.qualified, "rows", n)
	}
	return nil
}

// chooseIDs counts the rows of the ids given, in chunks, and which ids no
// table holds.
func (r *run) chooseIDs(ctx context.Context, d *deletion) error {
	ids, err := openIDs(r.job.Selection)
	if err != nil {
		return err
	}
	defer ids.Close()
	var total, missing int64
	var some []string
	for {
		chunk, err := ids.next(r.job.BatchSize)
		if err != nil || len(chunk) == 0 {
			if err != nil {
				return err
			}
			break
		}
		total += int64(len(chunk))
		found := map[string]bool{}
		for _, rd := range r.readers {
			if err := rd.foundIDs(ctx, r.conn, chunk, found); err != nil {
				return err
			}
		}
		for _, id := range chunk {
			if !found[id] {
				missing++
				if len(some) < 5 {
					some = append(some, id)
				}
			}
		}
	}
	r.st.IDsDigest = ids.digest()
	r.st.Chosen, r.st.Missing = total-missing, missing
	if missing > 0 && !r.job.Partial {
		return missingIDs(missing, total, some, d, r.cfg.Source == config.SourcePoll)
	}
	return nil
}
