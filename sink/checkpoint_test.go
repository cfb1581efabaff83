package sink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// The store creates its compacted topic, finds nothing on a first start,
// returns the latest of several saves to a later process, and ignores
// other relays' keys in the same partition.
func TestCheckpointStoreRoundTrip(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := connector.CheckpointKey{SystemID: "7312345678901234567", Database: "app", Slot: "s1"}
	cfg := sink.Config{Brokers: brokers}

	st, err := sink.NewCheckpointStore(ctx, cfg, "", key)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := st.Load(ctx); err != nil || found {
		t.Fatalf("first Load: found=%v err=%v, want nothing", found, err)
	}
	other, err := sink.NewCheckpointStore(ctx, cfg, "", connector.CheckpointKey{SystemID: key.SystemID, Database: "app", Slot: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	written := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	for i, lsn := range []uint64{100, 200, 300} {
		if err := st.Save(ctx, connector.Checkpoint{EndLSN: lsn, CommitTime: written, LastEventID: "e", Events: int64(i + 1), RelayVersion: "test", Written: written}); err != nil {
			t.Fatalf("Save %d: %v", lsn, err)
		}
		if err := other.Save(ctx, connector.Checkpoint{EndLSN: lsn + 1000, Written: written}); err != nil {
			t.Fatalf("other Save: %v", err)
		}
	}
	st.Close()

	adm := kadm.NewClient(mustClient(t, brokers))
	rcs, err := adm.DescribeTopicConfigs(ctx, sink.DefaultCheckpointTopic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(sink.DefaultCheckpointTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", policy)
	}

	again, err := sink.NewCheckpointStore(ctx, cfg, "", key)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	cp, found, err := again.Load(ctx)
	if err != nil || !found {
		t.Fatalf("Load after saves: found=%v err=%v", found, err)
	}
	want := connector.Checkpoint{Key: key, EndLSN: 300, CommitTime: written, LastEventID: "e", Events: 3, RelayVersion: "test", Written: written}
	if cp != want {
		t.Fatalf("Load:\n got %+v\nwant %+v", cp, want)
	}
}

// SaveAsync saves as Save does without waiting: saves made back to back
// are each answered once, in the order they were made, and Load returns
// the last; a save whose context has ended is answered with the error,
// never left unanswered.
func TestCheckpointStoreSaveAsync(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := connector.CheckpointKey{SystemID: "7312345678901234567", Database: "app", Slot: "async"}
	st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: brokers}, "", key)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	type answer struct {
		lsn uint64
		err error
	}
	answers := make(chan answer, 3)
	for _, lsn := range []uint64{100, 200, 300} {
		st.SaveAsync(ctx, connector.Checkpoint{EndLSN: lsn}, func(err error) { answers <- answer{lsn, err} })
	}
	for _, want := range []uint64{100, 200, 300} {
		select {
		case a := <-answers:
			if a.lsn != want || a.err != nil {
				t.Fatalf("answer for %d (%v), want %d answered first, with no error", a.lsn, a.err, want)
			}
		case <-ctx.Done():
			t.Fatalf("no answer for the save at %d", want)
		}
	}
	if cp, found, err := st.Load(ctx); err != nil || !found || cp.EndLSN != 300 {
		t.Fatalf("Load = %+v, %v, %v; want the last save, at 300", cp, found, err)
	}

	ended, stop := context.WithCancel(ctx)
	stop()
	failed := make(chan error, 1)
	st.SaveAsync(ended, connector.Checkpoint{EndLSN: 400}, func(err error) { failed <- err })
	select {
	case err := <-failed:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a save with an ended context: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("a save with an ended context was never answered")
	}
}

// A relay pointed at another cluster finds nothing under its own key but
// the checkpoint its database and slot left on the old cluster, even in a
// topic of many partitions, and never another slot's.
func TestCheckpointStoreForeignCluster(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.SeedTopics(8, sink.DefaultCheckpointTopic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := sink.Config{Brokers: brokers}
	old := connector.CheckpointKey{SystemID: "111", Database: "app", Slot: "s"}
	for _, k := range []connector.CheckpointKey{old, {SystemID: "111", Database: "app", Slot: "other"}} {
		st, err := sink.NewCheckpointStore(ctx, cfg, "", k)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Save(ctx, connector.Checkpoint{EndLSN: 42, LastEventID: k.Slot}); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	moved := connector.CheckpointKey{SystemID: "222", Database: "app", Slot: "s"}
	st, err := sink.NewCheckpointStore(ctx, cfg, "", moved)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp, found, err := st.Load(ctx)
	if err != nil || !found {
		t.Fatalf("Load: found=%v err=%v, want the old cluster's checkpoint", found, err)
	}
	if cp.Key != old || cp.EndLSN != 42 || cp.LastEventID != "s" {
		t.Fatalf("Load = %+v, want the checkpoint saved under %s", cp, old)
	}
	if fs := st.ForeignCheckpoints(); len(fs) != 1 || fs[0].Key != old {
		t.Fatalf("ForeignCheckpoints = %+v, want the one of %s", fs, old)
	}
	// A third cluster with the same names: Load gives the latest, and
	// ForeignCheckpoints both, for the caller to judge.
	third := connector.CheckpointKey{SystemID: "333", Database: "app", Slot: "s"}
	st3, err := sink.NewCheckpointStore(ctx, cfg, "", third)
	if err != nil {
		t.Fatal(err)
	}
	if err := st3.Save(ctx, connector.Checkpoint{EndLSN: 99}); err != nil {
		t.Fatal(err)
	}
	st3.Close()
	if cp, _, err := st.Load(ctx); err != nil || cp.Key != third {
		t.Fatalf("Load with two other clusters' = %+v, %v; want the latest, %s's", cp, err, third)
	}
	if fs := st.ForeignCheckpoints(); len(fs) != 2 || fs[0].Key != old || fs[1].Key != third {
		t.Fatalf("ForeignCheckpoints = %+v, want %s's and %s's", fs, old, third)
	}
	// Once the relay saves under its own key, that one wins.
	if err := st.Save(ctx, connector.Checkpoint{EndLSN: 7}); err != nil {
		t.Fatal(err)
	}
	if cp, _, err := st.Load(ctx); err != nil || cp.Key != moved || cp.EndLSN != 7 {
		t.Fatalf("Load after own save = %+v, %v; want its own checkpoint", cp, err)
	}
	// What check reads, creating nothing.
	own, found, fs, err := sink.ReadCheckpoints(ctx, cfg, "", moved)
	if err != nil || !found || own.EndLSN != 7 || len(fs) != 2 {
		t.Fatalf("ReadCheckpoints = %+v, %v, %+v, %v; want its own checkpoint and the two others'", own, found, fs, err)
	}
	if _, found, fs, err := sink.ReadCheckpoints(ctx, cfg, "", connector.CheckpointKey{SystemID: "444", Database: "app", Slot: "s"}); err != nil || found || len(fs) != 3 {
		t.Fatalf("ReadCheckpoints of a new cluster = found %v, %+v, %v; want the three others'", found, fs, err)
	}
	if _, found, fs, err := sink.ReadCheckpoints(ctx, cfg, "no.such.topic", moved); err != nil || found || fs != nil {
		t.Fatalf("ReadCheckpoints of a missing topic = found %v, %+v, %v; want nothing", found, fs, err)
	}
}

// A record under the relay's key that cannot be trusted stops Load with
// an error naming the topic, offset and problem; it is never skipped in
// favour of an older good record, and never a crash.
func TestCheckpointStoreRejects(t *testing.T) {
	key := connector.CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	for _, tc := range []struct {
		name, value, want string
	}{
		{"corrupt", `{"version":1,"end_l`, "not JSON"},
		{"future version", `{"version":7,"system_identifier":"1"}`, "version 7 was written by a newer relay"},
		{"another cluster", `{"version":1,"system_identifier":"999","database":"app","slot":"s","end_lsn":"0/10"}`, `system_identifier "999"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, brokers := testenv.Kafka(t, kfake.SeedTopics(1, sink.DefaultCheckpointTopic))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: brokers}, "", key)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Save(ctx, connector.Checkpoint{EndLSN: 5}); err != nil {
				t.Fatal(err)
			}
			cl := mustClient(t, brokers)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: sink.DefaultCheckpointTopic, Key: []byte(key.String()), Value: []byte(tc.value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			_, found, err := st.Load(ctx)
			if !errors.Is(err, connector.ErrCheckpointUnreadable) {
				t.Fatalf("Load: found=%v err=%v, want ErrCheckpointUnreadable", found, err)
			}
			for _, w := range []string{tc.want, sink.DefaultCheckpointTopic, "offset 1", key.String()} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func mustClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Missing ACLs are named: which operation on which resource to grant.
func TestCheckpointStoreACLs(t *testing.T) {
	key := connector.CheckpointKey{SystemID: "1", Database: "app", Slot: "s"}
	topicACL := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: sink.DefaultCheckpointTopic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	for _, tc := range []struct {
		name string
		acls []kfake.ACL
		want string
	}{
		{"no describe", nil, "read: TOPIC_AUTHORIZATION_FAILED"},
		{"no create", []kfake.ACL{topicACL(kmsg.ACLOperationDescribe)}, "CREATE on the cluster or on topic"},
		{"no write", []kfake.ACL{topicACL(kmsg.ACLOperationDescribe), topicACL(kmsg.ACLOperationCreate), topicACL(kmsg.ACLOperationRead)}, "WRITE on topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, brokers := testenv.Kafka(t, kfake.EnableSASL(), kfake.EnableACLs(),
				kfake.Superuser("PLAIN", "admin", testPassword),
				kfake.User("PLAIN", "relay", testPassword, tc.acls...))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := sink.Config{Brokers: brokers, AllowPlaintextSASL: true,
				SASL: sink.SASL{Mechanism: "plain", Username: "relay", Password: testPassword}}
			st, err := sink.NewCheckpointStore(ctx, cfg, "", key)
			if err == nil {
				defer st.Close()
				err = st.Save(ctx, connector.Checkpoint{EndLSN: 1})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), sink.DefaultCheckpointTopic) {
				t.Fatalf("err = %v, want it to name the topic and say %q", err, tc.want)
			}
		})
	}
}
