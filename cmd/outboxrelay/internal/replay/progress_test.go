package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgress(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &progress{label: "replay r1", total: 3000, start: start}
	if got, want := p.figures(1000, start.Add(10*time.Second)), "1000/3000 rows (33%), 100 rows/s, about 20s left"; got != want {
		t.Errorf("figures = %q, want %q", got, want)
	}
	if got := p.figures(3000, start.Add(30*time.Second)); !strings.HasSuffix(got, "done") {
		t.Errorf("figures at the end = %q, want it to say done", got)
	}
	if got := p.bar(1500, start.Add(time.Second)); !strings.HasPrefix(got, "replay r1 ["+strings.Repeat("=", 15)+strings.Repeat(" ", 15)+"] 1500/3000") {
		t.Errorf("bar = %q", got)
	}
	// Not a terminal: a plain line now and then, never a carriage return.
	var b bytes.Buffer
	q := newProgress(&b, false, "replay r1", 10)
	q.every = 0
	q.update(5)
	q.end(10)
	if strings.Contains(b.String(), "\r") || !strings.Contains(b.String(), "replay r1: 5/10 rows") {
		t.Errorf("plain progress = %q", b.String())
	}
}
