package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Job is one replay, as the command line gave it.
type Job struct {
	Config *config.Config
	// Router routes as the relay does (app.Router); NullKeys: it takes
	// an event whose aggregate id is NULL.
	Router   connector.Router
	NullKeys bool
	Log      *slog.Logger
	// Selection chooses the rows of a new replay.
	Selection Selection
	// Resume is the id of a stopped replay to carry on from where it
	// stopped, with its own selection; empty: a new replay.
	Resume string
	// DryRun counts the rows and shows the first Show records (default
	// 10) as they would be published, publishing nothing.
	DryRun bool
	Show   int
	// Partial publishes what the table still holds of a selection that
	// reaches rows already deleted, instead of refusing it.
	Partial bool
	// BatchSize is the most rows read, and published, at a time. Default
	// 500.
	BatchSize int
	// Rate, when set, bounds the rows published a second.
	Rate int
	// StateTopic is where the replay's progress is kept. Default
	// kafka.checkpoint_topic + DefaultStateTopicSuffix.
	StateTopic string
	// Progress receives the progress (stderr); Terminal says it is a
	// terminal, where a bar is drawn.
	Progress io.Writer
	Terminal bool
	// Metrics, when not nil, count what the replay does.
	Metrics *Metrics
}

func (j *Job) setDefaults() {
	if j.Show == 0 {
		j.Show = 10
	}
	if j.BatchSize == 0 {
		j.BatchSize = 500
	}
	if j.Rate > 0 {
		j.BatchSize = min(j.BatchSize, max(j.Rate/4, 1))
	}
	if j.StateTopic == "" {
		j.StateTopic = j.Config.Kafka.CheckpointTopic + DefaultStateTopicSuffix
	}
	if j.Log == nil {
		j.Log = slog.New(slog.DiscardHandler)
	}
}

// Result is what a replay did.
type Result struct {
	// ID names the replay, for --resume.
	ID string
	// Chosen rows; Replayed of them are in Kafka again (DeadLettered of
	// those on the dead letter topic, which today's routing put there).
	Chosen, Replayed, DeadLettered int64
	// Missing is how many ids given no table holds (with Partial).
	Missing int64
	// TimeFrom says what the rows' commit times were read from.
	TimeFrom string
	// StateTopic is where the replay's progress is kept.
	StateTopic string
	// Finished: every row chosen is in Kafka again; false after a stop.
	Finished bool
	// AlreadyFinished: Resume named a replay that had finished.
	AlreadyFinished bool
	// Shown are the first records, in words, of a dry run.
	Shown   []string
	Elapsed time.Duration
}

// state is how far a replay got, the value of its record in the state
// topic. Its field names are the record's format.
type state struct {
	Version   int       `json:"version"`
	ID        string    `json:"replay"`
	Selection Selection `json:"selection"`
	// Until is the range's end, or the replay's start.
	Until  time.Time `json:"until"`
	Tables []string  `json:"tables"`
	// Bounds are each table's end when the replay started (reader.bound).
	Bounds []string `json:"bounds,omitempty"`
	// Table is the index of the table under way, Cursor the key of the
	// last row of it in Kafka (none yet: nil).
	Table  int      `json:"table"`
	Cursor []string `json:"cursor,omitempty"`
	// IDsDone: of a selection by id, how many ids are done.
	IDsDone   int64  `json:"ids_done,omitempty"`
	IDsDigest string `json:"ids_sha256,omitempty"`

	Chosen       int64     `json:"chosen"`
	Missing      int64     `json:"missing,omitempty"`
	Replayed     int64     `json:"replayed"`
	DeadLettered int64     `json:"dead_lettered,omitempty"`
	Started      time.Time `json:"started"`
	Updated      time.Time `json:"updated"`
	Finished     bool      `json:"finished"`
}

const stateVersion = 1

func stateKey(id string) string { return "replay/" + id }

// newID names a new replay: when it started, and a few random bytes.
func newID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "r" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// run is a replay under way.
type run struct {
	job     *Job
	cfg     *config.Config
	log     *slog.Logger
	conn    *pgx.Conn
	st      *state
	readers []*reader
	store   *store
	pub     *publisher
	marks   []connector.Header
	res     Result
	ids     *idList
}

// Replay publishes again the outbox rows job chooses, beside a running
// relay, which it leaves untouched: no slot, checkpoint or row of it is
// read or written but the rows it publishes, read with plain SELECTs. It
// returns once every row chosen is in Kafka again, or, when ctx is
// cancelled (a stop signal), once the batch under way is, with
// Result.Finished false: Job.Resume with Result.ID carries on from there.
func Replay(ctx context.Context, job Job) (Result, error) {
	job.setDefaults()
	r := &run{job: &job, cfg: job.Config, log: job.Log.With("component", "replay")}
	r.res.StateTopic = job.StateTopic
	started := time.Now()
	conn, err := pgsql.Connect(ctx, r.cfg.Postgres.URL, r.cfg.Postgres.Net)
	if err != nil {
		return Result{}, pgsql.ConnectFailed(classify("connect to PostgreSQL", err))
	}
	defer pgsql.Close(context.WithoutCancel(ctx), conn)
	r.conn = conn
	defer r.close()
	if err := r.prepare(ctx); err != nil || r.res.AlreadyFinished {
		return r.res, err
	}
	if job.DryRun {
		err = r.dryRun(ctx)
	} else {
		err = r.publishAll(ctx)
	}
	r.res.Elapsed = time.Since(started)
	return r.res, err
}

func (r *run) close() {
	if r.pub != nil {
		r.pub.Close()
	}
	if r.store != nil {
		r.store.Close()
	}
	if r.ids != nil {
		r.ids.Close()
	}
}

// prepare makes the replay's state: a new one, or the stopped one it
// resumes, and a reader for each of its tables.
func (r *run) prepare(ctx context.Context) error {
	if r.job.Resume != "" {
		return r.resume(ctx)
	}
	sel := r.job.Selection
	if err := sel.Validate(); err != nil {
		return err
	}
	now := time.Now()
	tables, err := r.tables(sel.Tables)
	if err != nil {
		return err
	}
	r.st = &state{Version: stateVersion, ID: newID(now), Selection: sel, Until: sel.Until, Tables: tables, Started: now}
	if r.st.Until.IsZero() {
		r.st.Until = now
	}
	if err := r.makeReaders(ctx, nil); err != nil {
		return err
	}
	if err := r.choose(ctx, now); err != nil {
		return err
	}
	r.res.ID, r.res.Chosen, r.res.Missing = r.st.ID, r.st.Chosen, r.st.Missing
	r.job.Metrics.setChosen(r.st.Chosen)
	return nil
}

// tables are the outbox tables to replay: those configured, or of them
// those named.
func (r *run) tables(only []string) ([]string, error) {
	all := r.cfg.Outbox.TableNames()
	switch {
	case len(only) == 0 && len(all) == 0:
		return nil, errors.New("outbox.table_patterns alone name the outbox tables; name the tables to replay with --table")
	case len(only) == 0:
		return all, nil
	}
	qualified := func(n string) string {
		s, t, err := pgsql.SplitTable(n)
		if err != nil {
			return n
		}
		return s + "." + t
	}
	var out []string
	for _, n := range only {
		q := qualified(n)
		if !slices.ContainsFunc(all, func(a string) bool { return qualified(a) == q }) && len(r.cfg.Outbox.TablePatterns) == 0 {
			return nil, fmt.Errorf("--table %s is not one of the outbox tables (%v)", n, all)
		}
		out = append(out, q)
	}
	return out, nil
}

// resume loads the state of the replay to resume.
func (r *run) resume(ctx context.Context) error {
	if err := r.openStore(ctx); err != nil {
		return err
	}
	var raw []byte
	key := stateKey(r.job.Resume)
	if err := r.store.load(ctx, key, func(k string, v []byte) {
		if k == key {
			raw = v
		}
	}); err != nil {
		return err
	}
	if raw == nil {
		return fmt.Errorf("no replay %q in the state topic %s: give the id a replay printed when it started (or stopped), and the same configuration", r.job.Resume, r.store.topic)
	}
	st := &state{}
	if err := json.Unmarshal(raw, st); err != nil || st.Version > stateVersion {
		return fmt.Errorf("the state of replay %q in topic %s cannot be read (version %d, this build reads %d): %v", r.job.Resume, r.store.topic, st.Version, stateVersion, err)
	}
	r.st = st
	r.res = Result{ID: st.ID, Chosen: st.Chosen, Missing: st.Missing, Replayed: st.Replayed, DeadLettered: st.DeadLettered, StateTopic: r.res.StateTopic}
	if st.Finished {
		r.res.Finished, r.res.AlreadyFinished = true, true
		return nil
	}
	r.job.Selection = st.Selection
	if err := r.makeReaders(ctx, st.Bounds); err != nil {
		return err
	}
	r.job.Metrics.setChosen(st.Chosen)
	return nil
}

func (r *run) openStore(ctx context.Context) error {
	if r.store != nil {
		return nil
	}
	s, err := openStore(ctx, r.cfg.SinkConfig(), r.job.StateTopic, r.log)
	if err != nil {
		return err
	}
	r.store = s
	return nil
}
