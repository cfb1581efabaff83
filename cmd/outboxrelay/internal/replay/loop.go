package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// publishAll publishes the rows chosen, a batch at a time, each batch
// with the state that says it was sent, until every row is in Kafka or
// ctx is cancelled. A stop lets the batch under way finish, within
// shutdown.timeout, so that the state says exactly where to resume.
func (r *run) publishAll(ctx context.Context) error {
	if err := r.openStore(ctx); err != nil {
		return err
	}
	work, stopWork := r.workContext(ctx)
	defer stopWork()
	pub, err := newPublisher(work, r.cfg, "-replay-"+r.st.ID, r.job.Log)
	if err != nil {
		return err
	}
	r.pub = pub
	r.marks = []connector.Header{{Key: HeaderReplay, Value: []byte(r.st.ID)}}
	if err := r.openIDList(); err != nil {
		return err
	}
	// Saved before the first batch, so that a stop at any moment can be
	// resumed.
	if err := r.save(work, nil, nil, nil, nil); err != nil {
		return err
	}
	r.log.Info("replay starting", "replay", r.st.ID, "rows_chosen", r.st.Chosen, "rows_done", r.st.Replayed,
		"state_topic", r.store.topic, "transactions", r.pub.txn, "commit_time_from", r.res.TimeFrom)
	prog := newProgress(r.job.Progress, r.job.Terminal, "replay "+r.st.ID, r.st.Chosen)
	paceFrom, paced := time.Now(), int64(0)
	for ctx.Err() == nil {
		rows, advance, more, err := r.next(work, r.job.BatchSize)
		if err != nil {
			return err
		}
		if err := r.sendRows(work, rows, advance); err != nil {
			return err
		}
		prog.update(r.st.Replayed)
		if !more {
			break
		}
		paced += int64(len(rows))
		r.pace(ctx, paceFrom, paced)
	}
	prog.end(r.st.Replayed)
	r.res.Replayed, r.res.DeadLettered = r.st.Replayed, r.st.DeadLettered
	if ctx.Err() != nil {
		r.log.Info("replay stopped; it resumes from here with --resume", "replay", r.st.ID, "rows_done", r.st.Replayed, "rows_chosen", r.st.Chosen)
		return nil
	}
	r.st.Finished = true
	r.res.Finished = true
	return r.save(work, nil, nil, nil, nil)
}

// workContext is the context of the replay's I/O: it outlives ctx by
// shutdown.timeout, so that a stop lets the batch under way finish.
func (r *run) workContext(ctx context.Context) (context.Context, func()) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.Shutdown.Timeout, cancel) })
	return work, func() { stop(); cancel() }
}

// openIDList opens the ids of a selection by id, past those done, after
// checking they are the ones the replay started with.
func (r *run) openIDList() error {
	if !r.job.Selection.byIDs() {
		return nil
	}
	check, err := openIDs(r.job.Selection)
	if err != nil {
		return err
	}
	for {
		chunk, err := check.next(10000)
		if err != nil {
			check.Close()
			return err
		}
		if len(chunk) == 0 {
			break
		}
	}
	check.Close()
	if check.digest() != r.st.IDsDigest {
		return fmt.Errorf("the ids are not those replay %s started with: --ids-file %s changed; start a new replay", r.st.ID, r.job.Selection.IDsFile)
	}
	if r.ids, err = openIDs(r.job.Selection); err != nil {
		return err
	}
	return r.ids.skip(r.st.IDsDone)
}

// next reads the next batch: its rows, how the state advances once they
// are in Kafka, and whether anything may follow.
func (r *run) next(ctx context.Context, limit int) (rows []row, advance func(*state), more bool, err error) {
	if r.ids != nil {
		chunk, err := r.ids.next(limit)
		if err != nil || len(chunk) == 0 {
			return nil, func(*state) {}, false, err
		}
		for _, rd := range r.readers {
			page, err := rd.page(ctx, r.conn, nil, chunk, 4*len(chunk)+16)
			if err != nil {
				return nil, nil, false, err
			}
			rows = append(rows, page...)
		}
		n := int64(len(chunk))
		return rows, func(st *state) { st.IDsDone += n }, true, nil
	}
	for r.st.Table < len(r.readers) {
		rd := r.readers[r.st.Table]
		page, err := rd.page(ctx, r.conn, r.st.Cursor, nil, limit)
		if err != nil {
			return nil, nil, false, err
		}
		if len(page) == limit {
			key := page[len(page)-1].key
			return page, func(st *state) { st.Cursor = key }, true, nil
		}
		table := r.st.Table
		done := func(st *state) { st.Table, st.Cursor = table+1, nil }
		if len(page) > 0 || table+1 == len(r.readers) {
			return page, done, table+1 < len(r.readers), nil
		}
		done(r.st)
	}
	return nil, func(*state) {}, false, nil
}

// sendRows publishes the batch with the state it leads to, and takes
// that state once Kafka has them.
func (r *run) sendRows(ctx context.Context, rows []row, advance func(*state)) error {
	st := *r.st
	advance(&st)
	var dead int64
	msgs, err := r.records(ctx, rows, &dead)
	if err != nil {
		return err
	}
	refuse := func(i int, cause *connector.EventError) (*connector.Message, error) {
		return r.deadLetter(&rows[i].e, msgs[i], cause, &dead)
	}
	if err := r.save(ctx, &st, msgs, refuse, func() { st.Replayed += int64(len(rows)); st.DeadLettered += dead }); err != nil {
		return err
	}
	*r.st = st
	r.job.Metrics.addReplayed(int64(len(rows)), dead)
	return nil
}

// save sends msgs and the state st (nil: the replay's own) that they
// lead to; count, when not nil, counts them into st once every message
// is handed over.
func (r *run) save(ctx context.Context, st *state, msgs []*connector.Message, refuse refusal, count func()) error {
	if st == nil {
		st = r.st
	}
	var encodeErr error
	mark := func() *connector.Message {
		if count != nil {
			count()
		}
		st.Updated = time.Now()
		v, err := json.Marshal(st)
		if err != nil {
			encodeErr = err
			return nil
		}
		return r.store.message(stateKey(st.ID), v)
	}
	if err := r.pub.send(ctx, msgs, mark, refuse); err != nil {
		return fmt.Errorf("replay %s: %w", st.ID, err)
	}
	return encodeErr
}

// records routes rows as the relay does, each with the replay's header;
// a row that cannot be published becomes its dead letter, as the relay
// would make it.
func (r *run) records(ctx context.Context, rows []row, dead *int64) ([]*connector.Message, error) {
	msgs := make([]*connector.Message, len(rows))
	for i := range rows {
		e := &rows[i].e
		err := e.Invalid
		if err != nil && rows[i].onlyNullKey && r.job.NullKeys {
			err = nil
		}
		var m connector.Message
		if err == nil {
			m, err = r.job.Router.Route(ctx, e)
		}
		var ee *connector.EventError
		switch {
		case errors.As(err, &ee):
			if msgs[i], err = r.deadLetter(e, &m, ee, dead); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, fmt.Errorf("route event %s: %w", e.ID, err)
		default:
			m.Headers = append(m.Headers[:len(m.Headers):len(m.Headers)], r.marks...)
			msgs[i] = &m
		}
	}
	return msgs, nil
}

// deadLetter is the dead letter record of an event that cannot be
// published, marked with the replay; without a dead letter topic the
// replay stops on it, as the relay does.
func (r *run) deadLetter(e *connector.Event, routed *connector.Message, cause *connector.EventError, dead *int64) (*connector.Message, error) {
	topic := r.cfg.Kafka.DeadLetterTopic
	if topic == "" && r.job.DryRun {
		topic = "(none: the replay would stop here)"
	} else if topic == "" {
		return nil, connector.Permanent(fmt.Errorf("event %s cannot be published: %w; with no dead letter topic (kafka.dead_letter_topic) the replay stops on it, as the relay does: correct the row or the routing, then --resume", e.ID, cause.Err))
	}
	dl := connector.NewDeadLetter(topic, e, routed, cause)
	dl.Headers = append(dl.Headers, r.marks...)
	*dead++
	r.log.Error("event cannot be published; sending it to the dead letter topic", "replay", r.st.ID, "event_id", e.ID, "dead_letter_topic", topic, "err", connector.Shorten(cause.Err.Error(), connector.DeadLetterHeaderBytes))
	return dl, nil
}

// pace waits, with a rate set, until the rows published so far are due.
func (r *run) pace(ctx context.Context, from time.Time, done int64) {
	if r.job.Rate <= 0 {
		return
	}
	due := from.Add(time.Duration(float64(done) / float64(r.job.Rate) * float64(time.Second)))
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(due)):
	}
}

// dryRun shows the first records as they would be published.
func (r *run) dryRun(ctx context.Context) error {
	r.marks = []connector.Header{{Key: HeaderReplay, Value: []byte(r.st.ID)}}
	if err := r.openDryIDs(); err != nil {
		return err
	}
	for len(r.res.Shown) < r.job.Show {
		rows, advance, more, err := r.next(ctx, r.job.Show-len(r.res.Shown))
		if err != nil {
			return err
		}
		var dead int64
		msgs, err := r.records(ctx, rows, &dead)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			r.res.Shown = append(r.res.Shown, describe(m))
		}
		advance(r.st)
		if !more {
			break
		}
	}
	return nil
}

func (r *run) openDryIDs() error {
	if !r.job.Selection.byIDs() {
		return nil
	}
	var err error
	r.ids, err = openIDs(r.job.Selection)
	return err
}

// describe is a record in words, for a dry run.
func describe(m *connector.Message) string {
	var hs []string
	for _, h := range m.Headers {
		hs = append(hs, h.Key+"="+connector.Shorten(string(h.Value), 80))
	}
	return fmt.Sprintf("event %s → topic %s, key %q, headers [%s], value %s",
		m.EventID, m.Topic, connector.Shorten(string(m.Key), 80), strings.Join(hs, ", "), connector.Shorten(string(m.Value), 200))
}
