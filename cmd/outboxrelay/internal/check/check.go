package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// Status is the outcome of one check.
type Status string

const (
	// Pass: as it should be.
	Pass Status = "PASS"
	// Warn: works, but deserves a look; does not fail the report.
	Warn Status = "WARN"
	// Fail: the relay cannot work like this.
	Fail Status = "FAIL"
	// Skip: not checked, because it is not configured or an earlier
	// check failed.
	Skip Status = "SKIP"
)

// Result is one line of the report.
type Result struct {
	Status Status `json:"status"`
	// Check names what was checked, e.g. "wal_level".
	Check string `json:"check"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says what to do; set for Fail and Warn.
	Fix string `json:"fix,omitempty"`
}

// Report is every result, in the order the checks ran.
type Report struct {
	Results []Result `json:"results"`
	secrets []string
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Status == Fail {
			return true
		}
	}
	return false
}

// Find returns the result of the named check.
func (r *Report) Find(check string) (Result, bool) {
	for _, res := range r.Results {
		if res.Check == check {
			return res, true
		}
	}
	return Result{}, false
}

func (r *Report) add(s Status, check, detail, fix string) {
	r.Results = append(r.Results, Result{Status: s, Check: check, Detail: detail, Fix: fix})
}

func (r *Report) pass(check, format string, args ...any) {
	r.add(Pass, check, fmt.Sprintf(format, args...), "")
}

func (r *Report) skip(check, why string) { r.add(Skip, check, why, "") }

// WriteTable writes the report as an aligned table, each fix on the line
// under its result, and a summary line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tRESULT")
	counts := map[Status]int{}
	for _, res := range r.Results {
		counts[res.Status]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", res.Status, res.Check, r.scrub(res.Detail))
		if res.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", r.scrub(res.Fix))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "all good"
	if r.Failed() {
		verdict = "outboxrelay cannot run like this"
	} else if counts[Warn] > 0 {
		verdict = "it can run; look at the warnings"
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d warnings, %d failed, %d skipped: %s\n", counts[Pass], counts[Warn], counts[Fail], counts[Skip], verdict)
	return err
}

// WriteJSON writes the report as JSON, for scripts.
func (r *Report) WriteJSON(w io.Writer) error {
	clean := Report{Results: make([]Result, len(r.Results))}
	for i, res := range r.Results {
		res.Detail, res.Fix = r.scrub(res.Detail), r.scrub(res.Fix)
		clean.Results[i] = res
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(clean)
}

// scrub is the last guard against a secret in a server's error text.
func (r *Report) scrub(s string) string {
	return secret.NewScrubber(r.secrets).Scrub(s)
}

// Option changes how Run checks.
type Option func(*options)

type options struct {
	timeout time.Duration
}

// WithTimeout bounds each connection attempt and each step. Default 10s.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Run checks everything cfg needs, PostgreSQL, Kafka, then the Schema
// Registry of format avro. It never stops
// at the first failure: a check that cannot run because of an earlier one
// is reported as skipped.
func Run(ctx context.Context, cfg *config.Config, opts ...Option) *Report {
	o := options{timeout: 10 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	r := &Report{secrets: cfg.Secrets()}
	pg := checkPostgres(ctx, r, cfg, o)
	checkKafka(ctx, r, cfg, o, pg)
	checkRegistry(ctx, r, cfg, o, pg)
	return r
}
