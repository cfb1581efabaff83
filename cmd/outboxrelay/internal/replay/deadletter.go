package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// DeadLetter is one dead-lettered event, as a list or show tells it.
type DeadLetter struct {
	// Where it is: topic/partition@offset, or the dead-letter table.
	Where   string
	EventID string
	// Reason is why it could not be published.
	Reason string
	// Time is when it was dead-lettered, as far as the record tells:
	// the dead letter record's timestamp (its event's commit time), or
	// the table's dead_at.
	Time time.Time
	// Topic is where routing sent it then; empty when routing failed
	// before it named one.
	Topic string
	// Key and Value are the record's (the table's aggregate id and row).
	Key, Value []byte
	Headers    []connector.Header
	// Done says what a redrive did with it: sent on, or set aside for a
	// dead letter of its own with a new reason; empty while it waits.
	Done string

	partition int32
	offset    int64
	// ctid is the dead-letter table row's.
	ctid string
}

// Filter chooses dead letters.
type Filter struct {
	// IDs, when not empty: these event ids only.
	IDs []string
	// Since: dead-lettered (by the record's time) at or after it.
	Since time.Time
	// Reason, when not nil, must match the reason.
	Reason *regexp.Regexp
	// All takes the dead letters a redrive already acted on too (list).
	All bool
}

func (f Filter) takes(d *DeadLetter) bool {
	switch {
	case d.Done != "" && !f.All:
		return false
	case len(f.IDs) > 0 && !slices.Contains(f.IDs, d.EventID):
		return false
	case !f.Since.IsZero() && d.Time.Before(f.Since):
		return false
	case f.Reason != nil && !f.Reason.MatchString(d.Reason):
		return false
	}
	return true
}

// dlTopic reads the dead letter topic, partition by partition, from its
// start to where it ended when the read began: what a redrive writes to
// it meanwhile is for the next.
type dlTopic struct {
	topic string
	cl    *kgo.Client
	// done are, by partition, the offsets a redrive acted on.
	done map[int32]*offsets
}

func openDLTopic(ctx context.Context, sc sink.Config, topic string, st *store) (*dlTopic, error) {
	opts, err := sink.ClientOptions(sc)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dead letter topic: kafka client: %w", err)
	}
	t := &dlTopic{topic: topic, cl: cl, done: map[int32]*offsets{}}
	if st != nil {
		if err := t.loadDone(ctx, st); err != nil {
			cl.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *dlTopic) Close() { t.cl.Close() }

func redriveKey(topic string, p int32) string { return "redrive/" + topic + "/" + strconv.Itoa(int(p)) }

// redriveState is what a redrive did with the dead letters of one
// partition, the value of its record in the state topic.
type redriveState struct {
	Version int      `json:"version"`
	Topic   string   `json:"topic"`
	Done    *offsets `json:"done"`
	// Redriven and SetAside count, over every redrive, what was sent on
	// and what was dead-lettered again with a new reason.
	Redriven int64     `json:"redriven"`
	SetAside int64     `json:"set_aside"`
	Updated  time.Time `json:"updated"`
}

func (t *dlTopic) loadDone(ctx context.Context, st *store) error {
	var bad error
	prefix := "redrive/" + t.topic + "/"
	err := st.load(ctx, prefix, func(k string, v []byte) {
		p, err := strconv.Atoi(k[len(prefix):])
		if err != nil || v == nil {
			return
		}
		rs := redriveState{}
		if err := json.Unmarshal(v, &rs); err != nil || rs.Done == nil {
			bad = errors.Join(bad, fmt.Errorf("state topic %s, key %s: %w", st.topic, k, err))
			return
		}
		t.done[int32(p)] = rs.Done
	})
	return errors.Join(err, bad)
}

// each calls fn with every dead letter of the topic, partition after
// partition, each in offset order, until fn returns an error.
func (t *dlTopic) each(ctx context.Context, fn func(d *DeadLetter) error) error {
	adm := kadm.NewClient(t.cl)
	starts, err := adm.ListStartOffsets(ctx, t.topic)
	if err != nil {
		return fmt.Errorf("dead letter topic %s: %w", t.topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, t.topic)
	if err != nil {
		return fmt.Errorf("dead letter topic %s: %w", t.topic, err)
	}
	var parts []int32
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == t.topic && o.Err == nil {
			parts = append(parts, o.Partition)
		}
	})
	if len(parts) == 0 {
		if o, ok := ends.Lookup(t.topic, 0); ok && o.Err != nil {
			return fmt.Errorf("dead letter topic %s: %w", t.topic, o.Err)
		}
	}
	slices.Sort(parts)
	for _, p := range parts {
		start, _ := starts.Lookup(t.topic, p)
		end, _ := ends.Lookup(t.topic, p)
		if end.Offset <= start.Offset {
			continue
		}
		if err := t.eachOf(ctx, p, start.Offset, end.Offset, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachOf reads partition p from start to end.
func (t *dlTopic) eachOf(ctx context.Context, p int32, start, end int64, fn func(d *DeadLetter) error) error {
	c, err := kgo.NewClient(append(t.cl.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: {p: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return fmt.Errorf("dead letter topic: kafka client: %w", err)
	}
	defer c.Close()
	done := t.done[p]
	for next := start; next < end; {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("read dead letter topic %s partition %d: %w", t.topic, p, ferr)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			next = r.Offset + 1
			if r.Attrs.IsControl() || r.Offset >= end {
				continue
			}
			d := fromRecord(r)
			if done != nil && done.has(r.Offset) {
				d.Done = "acted on by an earlier redrive"
			}
			if err := fn(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// fromRecord is the dead letter a record of the dead letter topic holds.
func fromRecord(r *kgo.Record) *DeadLetter {
	d := &DeadLetter{
		Where: fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset),
		Time:  r.Timestamp, Key: r.Key, Value: r.Value,
		partition: r.Partition, offset: r.Offset,
	}
	for _, h := range r.Headers {
		d.Headers = append(d.Headers, connector.Header{Key: h.Key, Value: h.Value})
		switch h.Key {
		case "id":
			d.EventID = string(h.Value)
		case connector.HeaderError:
			d.Reason = string(h.Value)
		case connector.HeaderOriginalTopic:
			d.Topic = string(h.Value)
		}
	}
	if d.Topic == "" {
		d.Topic = topicInReason(d.Reason)
	}
	return d
}

// notAllowed finds the topic in the reason of an event routed outside
// routing.topic_pattern (connector.TopicNotAllowedError), whose dead
// letter has no original topic header: routing refused the topic it made.
var notAllowed = regexp.MustCompile(`^topic "([^"]+)" is outside routing\.topic_pattern`)

// topicInReason is the topic a reason names as refused, or "".
func topicInReason(reason string) string {
	if m := notAllowed.FindStringSubmatch(reason); m != nil {
		return m[1]
	}
	return ""
}
