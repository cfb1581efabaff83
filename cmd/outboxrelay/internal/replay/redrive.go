package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// A redrive sends each dead letter it chooses through today's routing to
// where that now puts it. A dead letter record holds the event's key,
// value and id, not the other columns routing reads (aggregatetype, type,
// the headers column), so the event is read again by id from the outbox
// table, as a replay reads it; the poller's dead-letter table holds the
// whole row, which is read from there. One whose row is gone stays: what
// the record holds is not enough to route it as today's configuration
// would, and publishing it where it was meant to go then would bypass the
// fix the redrive is for. One that still cannot be published stays too,
// and when its reason is new, a dead letter record of its own says it,
// marked with the redrive; its old record counts as acted on.
//
// What was sent on is recorded, so that a second redrive sends nothing
// twice: for the dead letter topic in the state topic, one record per
// partition naming the offsets acted on, in the Kafka transaction of the
// records (kafka.delivery exactly_once) or right after Kafka acknowledged
// them; for the dead-letter table by deleting the rows sent on, once
// Kafka has them. A crash between the two sends those once more, with
// their id headers.

// Redrive is one redrive, as the command line gave it.
type Redrive struct {
	Config   *config.Config
	Router   connector.Router
	NullKeys bool
	Log      *slog.Logger
	Filter   Filter
	// BatchSize is the most dead letters sent at a time. Default 500.
	BatchSize int
	// StateTopic is where what was sent is recorded (the dead letter
	// topic's redrives). Default as Job.StateTopic's.
	StateTopic string
	Metrics    *Metrics
}

// RedriveResult is what a redrive did.
type RedriveResult struct {
	ID string
	// Source names where the dead letters are.
	Source string
	// Went to their topics; Stayed dead-lettered, of which SetAside with
	// a new reason (a dead letter of their own on the topic, their row's
	// reason in the table).
	Went, Stayed, SetAside int64
	// Stays are the first of those that stayed, with why.
	Stays []string
	// StateTopic is where what was sent is recorded; empty for a table.
	StateTopic string
	// Stopped: a stop signal ended it before every dead letter chosen.
	Stopped bool
}

// maxStays is how many of the dead letters that stayed the result names.
const maxStays = 10

// redrive is a redrive under way.
type redrive struct {
	Redrive
	log     *slog.Logger
	conn    *pgx.Conn
	readers []*reader
	pub     *publisher
	store   *store
	res     RedriveResult
	marks   []connector.Header
	stateOf map[int32]*redriveState
}

// RunRedrive sends the dead letters rd chooses on, from the dead letter
// topic when the relay has one, else from the poller's dead-letter
// tables. It returns once every one chosen is dealt with, or, after ctx
// is cancelled, once the batch under way is.
func RunRedrive(ctx context.Context, rd Redrive) (RedriveResult, error) {
	if rd.BatchSize == 0 {
		rd.BatchSize = 500
	}
	if rd.StateTopic == "" {
		rd.StateTopic = rd.Config.Kafka.CheckpointTopic + DefaultStateTopicSuffix
	}
	r := &redrive{Redrive: rd, log: rd.Log.With("component", "redrive"), stateOf: map[int32]*redriveState{}}
	r.res.ID = "d" + newID(time.Now())[1:]
	r.marks = []connector.Header{{Key: HeaderRedrive, Value: []byte(r.res.ID)}}
	if err := checkSource(rd.Config); err != nil {
		return r.res, err
	}
	conn, err := pgsql.Connect(ctx, rd.Config.Postgres.URL, rd.Config.Postgres.Net)
	if err != nil {
		return r.res, pgsql.ConnectFailed(classify("connect to PostgreSQL", err))
	}
	defer pgsql.Close(context.WithoutCancel(ctx), conn)
	r.conn = conn
	if err := r.makeReaders(ctx); err != nil {
		return r.res, err
	}
	work, stopWork := (&run{cfg: rd.Config}).workContext(ctx)
	defer stopWork()
	if r.pub, err = newPublisher(work, rd.Config, "-redrive", rd.Log); err != nil {
		return r.res, err
	}
	defer r.pub.Close()
	if topic := rd.Config.Kafka.DeadLetterTopic; topic != "" {
		err = r.fromTopic(ctx, work, topic)
	} else {
		err = r.fromTables(ctx, work)
	}
	r.res.Stopped = ctx.Err() != nil
	return r.res, err
}

// checkSource refuses a configuration that keeps no dead letters.
func checkSource(cfg *config.Config) error {
	if cfg.Kafka.DeadLetterTopic == "" && cfg.Source != config.SourcePoll {
		return errors.New("kafka.dead_letter_topic is not set, so the relay keeps no dead letters: it stops on an event it cannot publish, naming it, rather than set it aside. Set the topic (and restart the relay) to have such events set aside")
	}
	return nil
}

// makeReaders makes a reader of each outbox table, by which a dead
// letter's row is read again.
func (r *redrive) makeReaders(ctx context.Context) error {
	rn := &run{job: &Job{Config: r.Config}, cfg: r.Config, conn: r.conn,
		st: &state{Tables: r.Config.Outbox.TableNames()}}
	if err := rn.makeReaders(ctx, nil); err != nil {
		return err
	}
	r.readers = rn.readers
	return nil
}

// fromTopic redrives the dead letter topic, a partition's batch at a
// time.
func (r *redrive) fromTopic(ctx, work context.Context, topic string) error {
	st, err := openStore(work, r.Config.SinkConfig(), r.StateTopic, r.log)
	if err != nil {
		return err
	}
	defer st.Close()
	r.store, r.res.StateTopic, r.res.Source = st, st.topic, "dead letter topic "+topic
	// After the publisher fenced an earlier redrive's transaction: what it
	// committed is read, what it left open is gone.
	dl, err := openDLTopic(work, r.Config.SinkConfig(), topic, st)
	if err != nil {
		return err
	}
	defer dl.Close()
	for p, done := range dl.done {
		r.stateOf[p] = &redriveState{Version: stateVersion, Topic: topic, Done: done}
	}
	var batch []*DeadLetter
	errStop := errors.New("stopped")
	err = dl.each(work, func(d *DeadLetter) error {
		if len(batch) > 0 && (len(batch) >= r.BatchSize || batch[0].partition != d.partition || ctx.Err() != nil) {
			if err := r.sendBatch(work, topic, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
		if ctx.Err() != nil {
			return errStop
		}
		if r.Filter.takes(d) {
			batch = append(batch, d)
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	if err != nil || len(batch) == 0 {
		return err
	}
	return r.sendBatch(work, topic, batch)
}

// lookup reads the rows of the dead letters' events, by id.
func (r *redrive) lookup(ctx context.Context, batch []*DeadLetter) (map[string]*row, error) {
	var ids []string
	for _, d := range batch {
		if d.EventID != "" {
			ids = append(ids, d.EventID)
		}
	}
	found := map[string]*row{}
	if len(ids) == 0 {
		return found, nil
	}
	for _, rd := range r.readers {
		rows, err := rd.page(ctx, r.conn, nil, ids, 4*len(ids)+16)
		if err != nil {
			return nil, err
		}
		for i := range rows {
			if _, ok := found[rows[i].e.ID]; !ok {
				found[rows[i].e.ID] = &rows[i]
			}
		}
	}
	return found, nil
}

// outcome is what a redrive makes of one dead letter.
type outcome struct {
	d *DeadLetter
	// msg is the record sent: the event to its topic, or, when it stays
	// with a new reason, its new dead letter; nil when it stays as it is.
	msg *connector.Message
	// event is the event read again; nil when its row is gone.
	event *connector.Event
	// stay is why it stays; empty when it went. renewed: that is not the
	// reason it was dead-lettered with.
	stay    string
	renewed bool
}

// route decides each dead letter's outcome with today's routing.
func (r *redrive) route(ctx context.Context, batch []*DeadLetter, rows map[string]*row, dlTopic string) ([]*outcome, error) {
	out := make([]*outcome, len(batch))
	for i, d := range batch {
		o := &outcome{d: d}
		out[i] = o
		rw := rows[d.EventID]
		switch {
		case d.EventID == "":
			o.stay = "the dead letter has no event id (its row's id column was NULL), so its row cannot be read again; correct the row by hand"
			continue
		case rw == nil:
			o.stay = "its outbox row is gone (cleaned up, or deleted by the application), and the dead letter record alone lacks the columns routing needs (aggregatetype, type, headers); it stays"
			continue
		}
		o.event = &rw.e
		m, err := r.routeOne(ctx, rw, d)
		var ee *connector.EventError
		switch {
		case errors.As(err, &ee):
			o.stay = ee.Err.Error()
		case err != nil:
			return nil, fmt.Errorf("route event %s: %w", d.EventID, err)
		default:
			o.msg = m
		}
	}
	for _, o := range out {
		o.renewed = o.stay != "" && o.stay != o.d.Reason
		// A dead letter topic gets a new record; a dead-letter table row
		// gets the new reason in place (fromTable).
		if o.renewed && dlTopic != "" {
			o.msg = r.newDeadLetter(o, dlTopic, &connector.EventError{EventID: o.d.EventID, Err: errors.New(o.stay)})
		}
	}
	return out, nil
}

// routeOne routes the event of a dead letter, with the redrive's headers.
func (r *redrive) routeOne(ctx context.Context, rw *row, d *DeadLetter) (*connector.Message, error) {
	e := &rw.e
	if err := e.Invalid; err != nil && !(rw.onlyNullKey && r.NullKeys) {
		return nil, err
	}
	m, err := r.Router.Route(ctx, e)
	if err != nil {
		return nil, err
	}
	m.Headers = append(m.Headers[:len(m.Headers):len(m.Headers)], r.marks...)
	m.Headers = append(m.Headers, connector.Header{Key: HeaderRedriveFrom, Value: []byte(d.Where)})
	return &m, nil
}

// newDeadLetter is the dead letter that says why o still cannot be
// published, marked with the redrive: of the event read again, or, when
// its row is gone, of what the old record held.
func (r *redrive) newDeadLetter(o *outcome, topic string, cause *connector.EventError) *connector.Message {
	e := o.event
	if e == nil {
		e = &connector.Event{ID: o.d.EventID, AggregateID: string(o.d.Key), Payload: o.d.Value, CommitTime: o.d.Time}
	}
	dl := connector.NewDeadLetter(topic, e, &connector.Message{Topic: o.d.Topic}, cause)
	dl.Headers = append(dl.Headers, r.marks...)
	dl.Headers = append(dl.Headers, connector.Header{Key: HeaderRedriveFrom, Value: []byte(o.d.Where)})
	return dl
}

// sendBatch sends a batch of one partition of the dead letter topic on,
// with the record of what it did.
func (r *redrive) sendBatch(ctx context.Context, topic string, batch []*DeadLetter) error {
	rows, err := r.lookup(ctx, batch)
	if err != nil {
		return err
	}
	outs, err := r.route(ctx, batch, rows, topic)
	if err != nil {
		return err
	}
	part := batch[0].partition
	prev := r.stateOf[part]
	if prev == nil {
		prev = &redriveState{Version: stateVersion, Topic: topic, Done: &offsets{}}
	}
	next := *prev
	next.Done = prev.Done.clone()
	msgs, refuse := r.messages(outs, topic)
	mark := func() *connector.Message {
		went, _, aside := tally(outs)
		for _, o := range outs {
			if o.msg != nil {
				next.Done.add(o.d.offset)
			}
		}
		next.Redriven, next.SetAside, next.Updated = prev.Redriven+went, prev.SetAside+aside, time.Now()
		v, _ := json.Marshal(&next)
		return r.store.message(redriveKey(topic, part), v)
	}
	if err := r.pub.send(ctx, msgs, mark, refuse); err != nil {
		return fmt.Errorf("redrive %s: %w", r.res.ID, err)
	}
	r.stateOf[part] = &next
	r.count(outs)
	return nil
}

// messages are the records of the outcomes, and what to do with one the
// sink refuses at once: it stays, with a dead letter saying why.
func (r *redrive) messages(outs []*outcome, dlTopic string) ([]*connector.Message, refusal) {
	var msgs []*connector.Message
	var of []*outcome
	for _, o := range outs {
		if o.msg != nil {
			msgs, of = append(msgs, o.msg), append(of, o)
		}
	}
	refuse := func(i int, cause *connector.EventError) (*connector.Message, error) {
		o := of[i]
		if o.stay != "" || dlTopic == "" {
			// A dead letter too large to write, or no topic to write one
			// to: the sink's error says what is wrong.
			return nil, cause
		}
		o.stay, o.renewed = cause.Err.Error(), true
		o.msg = r.newDeadLetter(o, dlTopic, cause)
		return o.msg, nil
	}
	return msgs, refuse
}

// tally counts outcomes: went to their topics, stayed, and of those the
// ones that stay with a new reason.
func tally(outs []*outcome) (went, stayed, renewed int64) {
	for _, o := range outs {
		switch {
		case o.stay == "":
			went++
		case o.renewed:
			stayed++
			renewed++
		default:
			stayed++
		}
	}
	return went, stayed, renewed
}

// count adds a batch's outcomes to the result and the metrics.
func (r *redrive) count(outs []*outcome) {
	went, stayed, aside := tally(outs)
	r.res.Went, r.res.Stayed, r.res.SetAside = r.res.Went+went, r.res.Stayed+stayed, r.res.SetAside+aside
	r.Metrics.addRedriven(went, stayed)
	for _, o := range outs {
		if o.stay != "" && len(r.res.Stays) < maxStays {
			r.res.Stays = append(r.res.Stays, fmt.Sprintf("event %s (%s): %s", o.d.EventID, o.d.Where, connector.Shorten(o.stay, 300)))
		}
	}
	if went > 0 || stayed > 0 {
		r.log.Info("redrive batch done", "redrive", r.res.ID, "went", went, "stayed", stayed, "set_aside", aside)
	}
}
