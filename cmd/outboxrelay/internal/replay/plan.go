package replay

import (
	"errors"
	"fmt"
	"time"
)

// Selection says which outbox rows a replay publishes again. Exactly one
// of a time range (Since), ids (IDs or IDsFile) and an aggregate
// (AggregateType and AggregateID) chooses them; an aggregate may be
// narrowed to a range.
type Selection struct {
	// Since and Until: rows committed at or after Since and before Until.
	// Until zero: before the replay started, so that a replay beside a
	// running relay ends, however fast events come.
	Since, Until time.Time `json:",omitzero"`
	// IDs are event ids given on the command line, IDsFile a file of
	// them, one a line.
	IDs     []string `json:",omitempty"`
	IDsFile string   `json:",omitempty"`
	// AggregateType and AggregateID: the events of one aggregate.
	AggregateType string `json:",omitempty"`
	AggregateID   string `json:",omitempty"`
	// TimestampColumn is a column holding each row's insert time, which
	// tells when rows were committed where the server keeps no commit
	// times. Empty: routing.timestamp_column, if set.
	TimestampColumn string `json:",omitempty"`
	// Tables limits the replay to these of the configured outbox tables.
	Tables []string `json:",omitempty"`
}

func (s Selection) byIDs() bool       { return len(s.IDs) > 0 || s.IDsFile != "" }
func (s Selection) byAggregate() bool { return s.AggregateType != "" || s.AggregateID != "" }
func (s Selection) byRange() bool     { return !s.Since.IsZero() }

// Validate reports every problem with s at once, in the words of the
// command's flags.
func (s Selection) Validate() error {
	var errs []error
	switch n := count(s.byIDs(), s.byAggregate(), s.byRange()); {
	case n == 0:
		errs = append(errs, errors.New("choose the rows: --since TIME [--until TIME], --id ID (or --ids-file FILE), or --aggregate TYPE:ID"))
	case s.byIDs() && n > 1:
		errs = append(errs, errors.New("--id and --ids-file choose rows by themselves; leave out --since, --until and --aggregate"))
	}
	if !s.Until.IsZero() && !s.byRange() {
		errs = append(errs, errors.New("--until needs --since"))
	}
	if s.byRange() && !s.Until.IsZero() && !s.Until.After(s.Since) {
		errs = append(errs, fmt.Errorf("--until %s is not after --since %s", s.Until.Format(time.RFC3339Nano), s.Since.Format(time.RFC3339Nano)))
	}
	if s.byAggregate() && (s.AggregateType == "" || s.AggregateID == "") {
		errs = append(errs, errors.New("--aggregate takes TYPE:ID, both parts"))
	}
	return errors.Join(errs...)
}

func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// timeSource is how a replay tells when a row was committed.
type timeSource int

const (
	// timeNone: it cannot; rows are chosen by id or aggregate only, and
	// their records carry the replay's time.
	timeNone timeSource = iota
	// timeCommit: the commit times the server keeps with
	// track_commit_timestamp.
	timeCommit
	// timeCommitOrColumn: those, and the insert-time column for rows
	// whose commit time the server does not know.
	timeCommitOrColumn
	// timeColumn: the insert-time column alone.
	timeColumn
	// timePublished: the poller's published column, the time the relay
	// learnt Kafka had the row.
	timePublished
)

// chooseTime decides how a replay tells when the rows of a table were
// committed. The poller rewrites each row when it marks it, so the row's
// xmin, and its commit timestamp, are the mark's: the poller's rows are
// told by their insert time when there is a column for it, else by when
// they were published. A source of nothing but unmarked rows (poll.mode
// delete) never gets here (plan refuses it).
func chooseTime(poll, trackCommit bool, column string) timeSource {
	switch {
	case poll && column != "":
		return timeColumn
	case poll:
		return timePublished
	case trackCommit && column != "":
		return timeCommitOrColumn
	case trackCommit:
		return timeCommit
	case column != "":
		return timeColumn
	}
	return timeNone
}

// words say what the commit time of a row is taken from, and what that
// approximates, for the report.
func (ts timeSource) words(column string) string {
	switch ts {
	case timeCommit:
		return "commit times the server kept (track_commit_timestamp); rows whose commit time it does not know (committed before it was on) are left out of a range"
	case timeCommitOrColumn:
		return fmt.Sprintf("commit times the server kept (track_commit_timestamp), and %s, the insert time, for rows whose commit time it does not know", column)
	case timeColumn:
		return fmt.Sprintf("%s, the insert time: it comes before the commit by as long as the inserting transaction lasted, so a row inserted just before --since (or --until) that committed after it counts as before it", column)
	case timePublished:
		return "the poller's published column: when the relay learnt Kafka had the row, which follows its commit by the poller's claim and Kafka's acknowledgement"
	}
	return "nothing: the server keeps no commit times (track_commit_timestamp off) and no --timestamp-column is given"
}

// errNoCommitTime is the refusal of a range that nothing can tell.
var errNoCommitTime = errors.New("the replay cannot tell when rows were committed: the server keeps no commit times (track_commit_timestamp is off) and no column holds the insert time. " +
	"Name one (--timestamp-column created_at, or routing.timestamp_column), or choose the rows by --id, --ids-file or --aggregate; " +
	"track_commit_timestamp = on would let a later replay read commit times, of transactions committed after it is set")
