package httpserver

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pageRefresh is how often the status page reloads itself.
const pageRefresh = 5 * time.Second

// statusPage serves GET /: the status as a page for a person. It is
// rendered here, with no script and nothing fetched from elsewhere (the
// Content-Security-Policy forbids both), and reloads itself with a meta
// refresh, so that it works wherever the relay's port is reachable: a
// port-forward, a browser with scripts off.
func statusPage(cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		var b bytes.Buffer
		if err := pageTemplate.Execute(&b, newPageView(status(ctx, cfg))); err != nil {
			http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b.Bytes())
	})
}

// pageView is what the template shows: the status, with what it says
// already put in words.
type pageView struct {
	Status
	Refresh int
	// Headroom is the slot's safe WAL in words.
	Headroom string
	// Chart is the rate chart, or empty before the first samples.
	Chart     template.HTML
	ChartNote string
}

func newPageView(s Status) pageView {
	v := pageView{Status: s, Refresh: int(pageRefresh.Seconds())}
	if sl := s.Slot; sl != nil {
		v.Headroom = Headroom(sl.WALStatus, sl.SafeWALSizeBytes, sl.MaxWALKeepSizeBytes)
	}
	v.Chart, v.ChartNote = rateChart(s.Rate)
	return v
}

// Headroom says how much more WAL the server may write before a slot
// with walStatus is in danger (safe, nil when unknown) against
// max_slot_wal_keep_size (maxKeep, -1 when unbounded).
func Headroom(walStatus string, safe *int64, maxKeep int64) string {
	switch {
	case walStatus == "lost":
		return "none: the slot is lost"
	case maxKeep < 0:
		return "unbounded (max_slot_wal_keep_size = -1): the slot holds WAL until the disk is full"
	case safe == nil:
		return "unknown"
	}
	return fmt.Sprintf("%s of max_slot_wal_keep_size %s", Bytes(*safe), Bytes(maxKeep))
}

// The chart's size in SVG units; the page scales it to its box.
const chartW, chartH = 600.0, 120.0

// rateChart draws the rate samples as an inline SVG line, scaled to the
// highest, with what the axes mean in words beside it.
func rateChart(r Rate) (template.HTML, string) {
	n := len(r.Samples)
	if n < 2 {
		return "", fmt.Sprintf("no samples yet: one every %s", time.Duration(r.IntervalSeconds*float64(time.Second)))
	}
	peak := 0.0
	for _, s := range r.Samples {
		peak = math.Max(peak, s.EventsPerSecond)
	}
	scale := 1.0
	if peak > 0 {
		scale = (chartH - 4) / peak
	}
	var pts strings.Builder
	for i, s := range r.Samples {
		x := float64(i) * chartW / float64(n-1)
		y := chartH - 2 - s.EventsPerSecond*scale
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
	}
	line := strings.TrimSpace(pts.String())
	svg := fmt.Sprintf(`<svg viewBox="0 0 %.0f %.0f" preserveAspectRatio="none" role="img" aria-label="events per second">`+
		`<polygon points="0,%.0f %s %.0f,%.0f" fill="#cfe3f7"/><polyline points="%s" fill="none" stroke="#1f6fb2" stroke-width="2" vector-effect="non-scaling-stroke"/></svg>`,
		chartW, chartH, chartH, line, chartW, chartH, line)
	span := r.Samples[n-1].At.Sub(r.Samples[0].At).Round(time.Second)
	// svg holds numbers the code formatted and nothing else.
	return template.HTML(svg), fmt.Sprintf("peak %s/s; the last %s, one sample every %gs", rateText(peak), span, r.IntervalSeconds)
}

func rateText(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// Bytes is n bytes in the largest unit that keeps it at 1 or more.
func Bytes(n int64) string {
	v, sign := float64(n), ""
	if v < 0 {
		v, sign = -v, "-"
	}
	for _, unit := range []string{"bytes", "KiB", "MiB", "GiB", "TiB"} {
		if v < 1024 || unit == "TiB" {
			if unit == "bytes" {
				return fmt.Sprintf("%s%d bytes", sign, int64(v))
			}
			return fmt.Sprintf("%s%.1f %s", sign, v, unit)
		}
		v /= 1024
	}
	return ""
}

var pageFuncs = template.FuncMap{
	"bytes": func(n *uint64) string {
		if n == nil {
			return "unknown"
		}
		return Bytes(int64(*n))
	},
	"seconds": func(s float64) string {
		return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
	},
	"rate": rateText,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return max(now.Sub(t), 0).Round(100*time.Millisecond).String() + " ago"
	},
	"yesno": func(b *bool) string {
		switch {
		case b == nil:
			return "-"
		case *b:
			return "yes"
		}
		return "no"
	},
}

var pageTemplate = template.Must(template.New("status").Funcs(pageFuncs).Parse(pageHTML))
