package replay

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress shows how far a replay or redrive is: on a terminal a bar
// redrawn in place (rows done of rows chosen, the rate, the time left),
// else a plain line now and then, which a log collector keeps.
type progress struct {
	w     io.Writer
	tty   bool
	label string
	total int64
	start time.Time
	// drawn is when the last bar or line was written.
	drawn time.Time
	// every is how often a plain line is written.
	every time.Duration
}

// IsTerminal reports whether w is a terminal, where a progress bar is
// redrawn in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f.Fd())
}

func newProgress(w io.Writer, tty bool, label string, total int64) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, tty: tty, label: label, total: total, start: time.Now(), every: 5 * time.Second}
}

// update shows done rows of the total; often only on a terminal.
func (p *progress) update(done int64) {
	now := time.Now()
	switch {
	case p.tty && now.Sub(p.drawn) >= 100*time.Millisecond:
		fmt.Fprintf(p.w, "\r\033[K%s", p.bar(done, now))
	case !p.tty && now.Sub(p.drawn) >= p.every:
		fmt.Fprintln(p.w, p.line(done, now))
	default:
		return
	}
	p.drawn = now
}

// end ends the bar's line on a terminal, so that what follows starts on
// a line of its own.
func (p *progress) end(done int64) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", p.bar(done, time.Now()))
	}
}

const barWidth = 30

func (p *progress) bar(done int64, now time.Time) string {
	filled := 0
	if p.total > 0 {
		filled = int(min(done, p.total) * barWidth / p.total)
	}
	return fmt.Sprintf("%s [%s%s] %s", p.label, strings.Repeat("=", filled), strings.Repeat(" ", barWidth-filled), p.figures(done, now))
}

func (p *progress) line(done int64, now time.Time) string {
	return p.label + ": " + p.figures(done, now)
}

// figures are done of the total, the rate so far and the time left at it.
func (p *progress) figures(done int64, now time.Time) string {
	elapsed := now.Sub(p.start)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	pct := 100.0
	if p.total > 0 {
		pct = float64(min(done, p.total)) * 100 / float64(p.total)
	}
	left := "time left unknown"
	if rate > 0 && done < p.total {
		left = fmt.Sprintf("about %s left", time.Duration(float64(p.total-done)/rate*float64(time.Second)).Round(time.Second))
	} else if done >= p.total {
		left = "done"
	}
	return fmt.Sprintf("%d/%d rows (%.0f%%), %.0f rows/s, %s", done, p.total, pct, rate, left)
}
