package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
)

// relayStatus is what the test reads of the JSON of /status, by the names
// docs/status.md gives.
type relayStatus struct {
	Ready              bool  `json:"ready"`
	EventsAcknowledged int64 `json:"events_acknowledged"`
	Rate               struct {
		Samples []json.RawMessage `json:"samples"`
	} `json:"rate"`
	LastPublished *struct {
		ID string `json:"id"`
	} `json:"last_published"`
	DeadLetters struct {
		Total  int64 `json:"total"`
		Recent []struct {
			Topic  string `json:"topic"`
			Reason string `json:"reason"`
		} `json:"recent"`
	} `json:"dead_letters"`
}

// envScreenshot names the file TestStatusPage writes its screenshot of
// the page to (docs/status-page.png is one).
const envScreenshot = "OUTBOXRELAY_TEST_STATUS_SCREENSHOT"

// statusEvents are written in bursts, with a dead letter among them, so
// that the rate chart has a shape.
const statusEvents, statusBursts = 40, 4

// TestStatusPage relays events (and one too large for its topic, which is
// dead-lettered) with each source and checks the status page as a person
// sees it, in headless Chromium: the source, the slot or the poller's
// table, the counts the test relayed, the dead letter's reason; and for
// cdc, `outboxrelay status` with the relay up (exit 0, its numbers) and
// down (exit 1, the slot and checkpoint read from PostgreSQL and Kafka).
func TestStatusPage(t *testing.T) {
	chromium := chromiumPath(t)
	t.Run("cdc", func(t *testing.T) {
		r := startStatusRelay(t, "cdc")
		s := r.waitRelayed(t, 6)
		page := r.browse(t, chromium, os.Getenv(envScreenshot))
		for _, want := range []string{
			"ready", "source cdc", "Replication slot", r.name, "active, held by PID",
			"wal_status reserved", "unbounded (max_slot_wal_keep_size = -1)",
			fmt.Sprintf("%d acknowledged by Kafka", statusEvents+1),
			"1 sent to outbox.dead-letter", "outbox.event.order record is 5124 bytes", "more than the broker's limit of 2000",
			"outboxrelay dead-letters list", "outboxrelay dead-letters redrive",
			"running: ok", "postgres: ok", "kafka: ok", "source: ok", "progress: ok",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("the page does not show %q:\n%s", want, page)
			}
		}
		if s.LastPublished == nil || !strings.Contains(page, s.LastPublished.ID) {
			t.Errorf("the page does not show the last event published, %+v:\n%s", s.LastPublished, page)
		}
		r.checkStatusCommand(t)
	})
	t.Run("poll", func(t *testing.T) {
		r := startStatusRelay(t, "poll")
		r.waitRelayed(t, 0)
		page := r.browse(t, chromium, "")
		for _, want := range []string{
			"ready", "source poll", "Poller claims", "public.outbox", "0 row(s) unpublished",
			fmt.Sprintf("%d acknowledged by Kafka", statusEvents+1), "1 sent to outbox.dead-letter", "more than the broker's limit of 2000",
			"outboxrelay dead-letters list", "outboxrelay dead-letters redrive",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("the page does not show %q:\n%s", want, page)
			}
		}
	})
}

// chromiumPath is Debian's chromium, or the test skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("no chromium to load the status page in (Debian: apt-get install chromium; scripts/test does it)")
	return ""
}

// statusRelay is a relay started for TestStatusPage, with what it takes
// to run `outboxrelay status` on the same configuration.
type statusRelay struct {
	*appRelay
	env  map[string]string
	name string
	pool *pgxpool.Pool
}

func startStatusRelay(t *testing.T, source string) *statusRelay {
	t.Helper()
	dbURL := testenv.Postgres(t)
	pool := connectPool(t, dbURL)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	env := map[string]string{
		"postgres.url": dbURL, "outbox.table": "public.outbox", "source": source,
		"kafka.brokers": strings.Join(brokers, ","), "kafka.max_record_bytes": "2000",
		"kafka.dead_letter_topic": "outbox.dead-letter", "http.listen": freeAddr(t),
	}
	if source == "cdc" {
		env["cdc.slot"], env["cdc.publication"], env["cdc.status_interval"] = name, name, "100ms"
	} else {
		applyPollDDL(t, poller.Config{URL: dbURL, Table: "public.outbox"})
		env["poll.interval"] = "50ms"
	}
	return &statusRelay{appRelay: startApp(t, env), env: env, name: name, pool: pool}
}

// freeAddr is a loopback address with a port nothing listens on now:
// `outboxrelay status` finds the relay at http.listen, so it cannot be 0.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitRelayed writes the events in bursts, the too large one after the
// first, and waits until /status counts them all and has at least
// samples rate samples.
func (r *statusRelay) waitRelayed(t *testing.T, samples int) relayStatus {
	t.Helper()
	ctx := context.Background()
	for i := range statusBursts {
		workload{table: "outbox", writers: 1, aggregates: 4, events: statusEvents / statusBursts, seqBase: i * statusEvents / statusBursts / 4}.write(ctx, t, r.pool)
		if i == 0 {
			if _, err := r.pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'big', 'TooLarge', jsonb_build_object('pad', repeat('x', 5000)))`); err != nil {
				t.Fatal(err)
			}
		}
		if samples > 0 {
			time.Sleep(5 * time.Second)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, body := r.get(t, "/status")
		var s relayStatus
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatalf("GET /status: %v\n%s", err, body)
		}
		if s.EventsAcknowledged == statusEvents+1 && s.DeadLetters.Total == 1 && len(s.Rate.Samples) >= samples && s.Ready {
			if d := s.DeadLetters.Recent[0]; d.Topic != "outbox.event.order" || !strings.Contains(d.Reason, "more than the broker's limit") {
				t.Errorf("dead letter %+v, want the too large event's topic and reason", d)
			}
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes /status says:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// browse loads the page in headless Chromium and returns its text as a
// person reads it (the DOM after loading, without markup and styles); it
// also takes a screenshot, checks that it shows something, and keeps it
// at keep when that is set.
func (r *statusRelay) browse(t *testing.T, chromium, keep string) string {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile"),
			"--virtual-time-budget=2000"}, args...)
		cmd := exec.CommandContext(ctx, chromium, append(args, r.base+"/")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	dom := run("--dump-dom")
	shot := filepath.Join(dir, "status.png")
	run("--screenshot="+shot, "--window-size=1200,1000", "--hide-scrollbars")
	checkScreenshot(t, shot)
	if keep != "" {
		data, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(keep, data, 0o644)
		}
		if err != nil {
			t.Fatalf("keep the screenshot: %v", err)
		}
		t.Logf("screenshot of the status page written to %s", keep)
	}
	return visibleText(string(dom))
}

// checkScreenshot: the PNG is the window's size and shows a page, not a
// blank one (the header's dark band, the white sections, text).
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1200 || b.Dy() != 1000 {
		t.Errorf("screenshot is %dx%d, want 1200x1000", b.Dx(), b.Dy())
	}
	colors := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[r>>12<<8|g>>12<<4|bl>>12] = true
		}
	}
	if len(colors) < 8 {
		t.Errorf("the screenshot has %d colours: a blank page?", len(colors))
	}
}

var (
	styleOrHead = regexp.MustCompile(`(?s)<(style|head)\b.*?</(style|head)>`)
	inlineTag   = regexp.MustCompile(`</?(b|span|code|a)\b[^>]*>`)
	tag         = regexp.MustCompile(`<[^>]*>`)
	space       = regexp.MustCompile(`\s+`)
)

// visibleText is the text of an HTML document as shown: tags and styles
// gone (an inline element's text runs on, a block's stands apart),
// entities read, white space collapsed.
func visibleText(doc string) string {
	doc = styleOrHead.ReplaceAllString(doc, " ")
	doc = inlineTag.ReplaceAllString(doc, "")
	doc = tag.ReplaceAllString(doc, " ")
	return strings.TrimSpace(space.ReplaceAllString(html.UnescapeString(doc), " "))
}

// checkStatusCommand runs `outboxrelay status` on the relay's
// configuration while it runs, then after it stopped.
func (r *statusRelay) checkStatusCommand(t *testing.T) {
	t.Helper()
	code, out := r.statusCommand(t)
	for _, want := range []string{": ready", "cdc, connected; tables public.outbox", r.name + ": active, held by PID",
		strconv.Itoa(statusEvents+1) + " acknowledged", "more than the broker's limit of 2000",
		"outboxrelay dead-letters redrive, once the routing is fixed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("outboxrelay status with the relay up: exit %d, want 0 and %q in:\n%s", code, want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^dead letters +1$`).MatchString(out) {
		t.Errorf("outboxrelay status with the relay up does not count the dead letter:\n%s", out)
	}
	r.stop(t)
	code, out = r.statusCommand(t)
	for _, want := range []string{"no relay answers at http://" + r.env["http.listen"] + "/status",
		r.name + ": held by no session", "wal_status reserved", "checkpoint", "written", "ago by relay",
		strconv.Itoa(statusEvents+1) + " events under this key", "the relay is not running"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("outboxrelay status with the relay stopped: exit %d, want 1 and %q in:\n%s", code, want, out)
		}
	}
}

// statusCommand runs `outboxrelay status` with the relay's configuration
// (its environment) and returns the exit code and what it printed.
func (r *statusRelay) statusCommand(t *testing.T) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "status")
	cmd.Env = os.Environ()
	for k, v := range r.env {
		cmd.Env = append(cmd.Env, "OUTBOXRELAY_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("outboxrelay status: %v", err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}
