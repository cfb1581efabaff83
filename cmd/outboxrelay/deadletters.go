package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/replay"
	"github.com/outboxrelay/outboxrelay/connector"
)

var deadLettersUsage = commandUsage{
	text: `Usage: outboxrelay dead-letters --config FILE list [--all] [--id ID] [--since TIME] [--reason REGEX]
       outboxrelay dead-letters --config FILE show EVENT_ID
       outboxrelay dead-letters --config FILE redrive [--id ID ...] [--since TIME] [--reason REGEX]
       outboxrelay dead-letters --debezium-config FILE [--config FILE] ...

The events the relay could not publish: those on the dead letter topic
(kafka.dead_letter_topic), or, for the poller without one, in its
dead-letter tables. list shows each with why, when and where it was meant
to go; show prints one whole; redrive sends them (all, or those chosen)
through today's configuration's routing to where it now puts them, with
the header outboxrelay.redrive, reading each event again from its outbox
row. One whose row is gone, or that still cannot be published, stays,
with its new reason; the command says how many went and how many stayed.
What was sent is recorded (the state topic for the dead letter topic; the
table's rows are deleted), so a second redrive sends nothing twice. With
kafka.delivery exactly_once in Kafka transactions of its own.
`,
	docs: "docs/replay.md#dead-letters",
}

// deadLettersCmd is `outboxrelay dead-letters`.
func deadLettersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay dead-letters", deadLettersUsage)
	cf := addConfigFlags(fs)
	if err := parseFlags(fs, args, -1, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		printUsage(fs, stderr)
		return usageError{errors.New("outboxrelay dead-letters: no command given; want list, show or redrive")}
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	switch sub {
	case "list", "show", "redrive":
	default:
		printUsage(fs, stderr)
		return usageError{fmt.Errorf("outboxrelay dead-letters: unknown command %q; want list, show or redrive", sub)}
	}
	sfs := newFlagSet("outboxrelay dead-letters "+sub, deadLettersUsage)
	scf := addConfigFlags(sfs)
	o := addDeadLetterFlags(sfs, sub)
	maxArgs := 0
	if sub == "show" {
		maxArgs = 1
	}
	if err := parseFlags(sfs, rest, maxArgs, stdout, stderr); err != nil {
		return err
	}
	if err := o.parse(sfs, sub); err != nil {
		printUsage(sfs, stderr)
		return usageError{fmt.Errorf("%s: %w", sfs.Name(), err)}
	}
	if *scf.path != "" || *scf.debezium != "" {
		cf = scf
	}
	cfg, log, err := loadForTool(cf, stderr)
	if err != nil {
		return err
	}
	redriveLine := "outboxrelay dead-letters " + strings.Join(shellQuoted(cf.args()), " ") + " redrive --id "
	switch sub {
	case "list":
		return listDeadLetters(ctx, o, cfg, log, redriveLine, stdout)
	case "show":
		return showDeadLetter(ctx, o, cfg, log, redriveLine, stdout)
	}
	return redriveDeadLetters(ctx, o, cfg, log, stdout)
}

// deadLetterFlags are the flags of a dead-letters command.
type deadLetterFlags struct {
	ids           stringList
	since, reason *string
	all           *bool
	stateTopic    *string
	batchSize     *int
	metricsListen *string
	filter        replay.Filter
	showID        string
}

func addDeadLetterFlags(fs *flag.FlagSet, sub string) *deadLetterFlags {
	o := &deadLetterFlags{all: new(bool), batchSize: new(int), metricsListen: new(string)}
	o.stateTopic = fs.String("state-topic", "", "compacted topic recording what redrives sent (default kafka.checkpoint_topic + .replay)")
	if sub == "show" {
		return o
	}
	fs.Var(&o.ids, "id", "the dead letters of this event id (repeat for more)")
	o.since = fs.String("since", "", "dead letters whose record time (the event's commit time; the table's dead_at) is at or after this time (RFC 3339)")
	o.reason = fs.String("reason", "", "dead letters whose reason matches this regular expression (RE2)")
	switch sub {
	case "list":
		o.all = fs.Bool("all", false, "also those a redrive sent on or set aside")
	case "redrive":
		o.batchSize = fs.Int("batch-size", 500, "dead letters sent at a time")
		o.metricsListen = fs.String("metrics-listen", "", "serve /metrics at this address while the redrive runs")
	}
	return o
}

// parse reads the flags into the filter.
func (o *deadLetterFlags) parse(fs *flag.FlagSet, sub string) error {
	if sub == "show" {
		if fs.NArg() != 1 {
			return errors.New("EVENT_ID is missing")
		}
		o.showID = fs.Arg(0)
		o.filter = replay.Filter{IDs: []string{o.showID}, All: true}
		return nil
	}
	o.filter = replay.Filter{IDs: o.ids, All: *o.all}
	var errs []error
	if *o.since != "" {
		t, err := time.Parse(time.RFC3339Nano, *o.since)
		if err != nil {
			errs = append(errs, fmt.Errorf("--since %q is not an RFC 3339 time such as 2026-11-25T10:00:00Z", *o.since))
		}
		o.filter.Since = t
	}
	if *o.reason != "" {
		re, err := regexp.Compile(*o.reason)
		if err != nil {
			errs = append(errs, fmt.Errorf("--reason %q is not a regular expression (RE2): %w", *o.reason, err))
		}
		o.filter.Reason = re
	}
	if *o.batchSize < 1 && sub == "redrive" {
		errs = append(errs, errors.New("--batch-size must be at least 1"))
	}
	return errors.Join(errs...)
}

func listDeadLetters(ctx context.Context, o *deadLetterFlags, cfg *config.Config, log *slog.Logger, redriveLine string, stdout io.Writer) error {
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WHERE\tEVENT ID\tTIME\tTOPIC\tREASON")
	n := 0
	where, err := replay.ListDeadLetters(ctx, cfg, *o.stateTopic, o.filter, log, func(d *replay.DeadLetter) error {
		n++
		reason := connector.Shorten(oneLine(d.Reason), 160)
		if d.Done != "" {
			reason = "(" + d.Done + ") " + reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Where, orDash(d.EventID), d.Time.UTC().Format(time.RFC3339), orDash(d.Topic), reason)
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d dead letters in the %s. Send one on with: %sEVENT_ID (or all with redrive alone)\n", n, where, redriveLine)
	return nil
}

func showDeadLetter(ctx context.Context, o *deadLetterFlags, cfg *config.Config, log *slog.Logger, redriveLine string, stdout io.Writer) error {
	n := 0
	where, err := replay.ListDeadLetters(ctx, cfg, *o.stateTopic, o.filter, log, func(d *replay.DeadLetter) error {
		n++
		state := "waiting"
		if d.Done != "" {
			state = d.Done
		}
		var hs []string
		for _, h := range d.Headers {
			hs = append(hs, h.Key+"="+connector.Shorten(string(h.Value), 200))
		}
		fmt.Fprintf(stdout, "dead letter %s\n  event id: %s\n  time:     %s\n  topic:    %s\n  reason:   %s\n  state:    %s\n  key:      %s\n  headers:  %s\n  value:    %s\n  redrive:  %s%s\n",
			d.Where, orDash(d.EventID), d.Time.UTC().Format(time.RFC3339Nano), orDash(d.Topic), d.Reason, state,
			connector.Shorten(string(d.Key), 200), strings.Join(hs, ", "), connector.Shorten(string(d.Value), 4096), redriveLine, cdc.ShellWord(d.EventID))
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no dead letter of event %q in the %s", o.showID, where)
	}
	return nil
}

func redriveDeadLetters(ctx context.Context, o *deadLetterFlags, cfg *config.Config, log *slog.Logger, stdout io.Writer) error {
	rd := replay.Redrive{Config: cfg, Log: log, Filter: o.filter, BatchSize: *o.batchSize, StateTopic: *o.stateTopic}
	var err error
	if rd.Router, rd.NullKeys, err = app.Router(ctx, cfg, log, nil); err != nil {
		return err
	}
	stop, m, err := serveMetrics(ctx, *o.metricsListen, log)
	if err != nil {
		return err
	}
	defer stop()
	rd.Metrics = m
	res, err := replay.RunRedrive(ctx, rd)
	for _, s := range res.Stays {
		fmt.Fprintf(stdout, "  stays: %s\n", s)
	}
	recorded := "the rows sent on are deleted from it"
	if res.StateTopic != "" {
		recorded = "what was sent is recorded in topic " + res.StateTopic
	}
	fmt.Fprintf(stdout, "outboxrelay dead-letters redrive %s: %d went to their topics, %d stayed (%d of them with a new reason) in the %s; %s, so a second redrive sends none of them again\n",
		res.ID, res.Went, res.Stayed, res.SetAside, res.Source, recorded)
	if err != nil {
		return err
	}
	if res.Stopped {
		return fmt.Errorf("redrive %s stopped by a signal before every dead letter chosen was dealt with; run it again for the rest", res.ID)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
