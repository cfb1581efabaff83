package replay

import (
	"context"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// ListDeadLetters calls fn with each dead letter f takes, in the order
// they were dead-lettered: those of the dead letter topic when the relay
// has one (with what earlier redrives did with them, from stateTopic,
// default as Job.StateTopic's), else those of the poller's dead-letter
// tables. It writes nothing, and returns where the dead letters are.
func ListDeadLetters(ctx context.Context, cfg *config.Config, stateTopic string, f Filter, log *slog.Logger, fn func(*DeadLetter) error) (string, error) {
	if err := checkSource(cfg); err != nil {
		return "", err
	}
	if topic := cfg.Kafka.DeadLetterTopic; topic != "" {
		return "dead letter topic " + topic, listTopic(ctx, cfg, topic, stateTopic, f, log, fn)
	}
	conn, err := pgsql.Connect(ctx, cfg.Postgres.URL, cfg.Postgres.Net)
	if err != nil {
		return "", pgsql.ConnectFailed(classify("connect to PostgreSQL", err))
	}
	defer pgsql.Close(context.WithoutCancel(ctx), conn)
	r := &redrive{Redrive: Redrive{Config: cfg}, conn: conn}
	if err := r.makeReaders(ctx); err != nil {
		return "", err
	}
	where := "dead-letter table"
	for _, rd := range r.readers {
		where += " " + rd.t.poll.deadLetter
		if err := listTable(ctx, conn, rd, f, fn); err != nil {
			return where, err
		}
	}
	return where, nil
}

func listTopic(ctx context.Context, cfg *config.Config, topic, stateTopic string, f Filter, log *slog.Logger, fn func(*DeadLetter) error) error {
	if stateTopic == "" {
		stateTopic = cfg.Kafka.CheckpointTopic + DefaultStateTopicSuffix
	}
	st, exists, err := openStoreIf(ctx, cfg.SinkConfig(), stateTopic, log, false)
	if err != nil {
		return err
	}
	defer st.Close()
	if !exists {
		st = nil
	}
	dl, err := openDLTopic(ctx, cfg.SinkConfig(), topic, st)
	if err != nil {
		return err
	}
	defer dl.Close()
	return dl.each(ctx, func(d *DeadLetter) error {
		if !f.takes(d) {
			return nil
		}
		return fn(d)
	})
}
