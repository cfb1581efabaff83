package deploy_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

const (
	alertsFile     = "prometheus/alerts.yaml"
	alertTestsFile = "prometheus/alerts_test.yaml"
	// runbooksGlob are the runbook pages: the relay and its slot
	// (runbooks.md), events on their way to Kafka (runbooks-publishing.md).
	runbooksGlob = "../docs/runbooks*.md"
	// runbookBase is where every alert's runbook_url points, followed by
	// the page and the anchor of its section.
	runbookBase = "https://github.com/outboxrelay/outboxrelay/blob/main/docs/"
)

// ruleFile is a Prometheus rule file, as far as these tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var alerts []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerts", alertsFile)
	}
	return alerts
}

// promtool runs promtool with args in dir prometheus/, or skips the test
// when it is not installed (scripts/test installs it).
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus; scripts/test does it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestAlertRulesCheck is promtool's lint of the rules: they parse, their
// templates expand, their names are valid.
func TestAlertRulesCheck(t *testing.T) {
	promtool(t, "check", "rules", "alerts.yaml")
}

// TestAlertRulesUnitTests runs alerts_test.yaml, in which each alert fires
// on synthetic series that should page and not on series that should not.
func TestAlertRulesUnitTests(t *testing.T) {
	promtool(t, "test", "rules", "alerts_test.yaml")
}

// TestEveryAlertIsTested checks that alerts_test.yaml has, for every alert,
// an evaluation where it fires and one where it does not, so that a new
// alert cannot go in untested.
func TestEveryAlertIsTested(t *testing.T) {
	data, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, e := range tc.AlertRuleTest {
			if len(e.ExpAlerts) > 0 {
				fires[e.Alertname] = true
			} else {
				quiet[e.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, a := range loadAlerts(t) {
		alerts[a.Alert] = true
		if !fires[a.Alert] {
			t.Errorf("%s: no test in %s where it fires", a.Alert, alertTestsFile)
		}
		if !quiet[a.Alert] {
			t.Errorf("%s: no test in %s where it stays quiet", a.Alert, alertTestsFile)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(fires)) {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not have", alertTestsFile, name, alertsFile)
		}
	}
}

// TestAlertsHaveRunbooks checks that every alert has a summary, a
// severity and a runbook_url pointing at a section of one of the runbook
// pages, docs/runbooks*.md, that exists (by GitHub's anchor rules), and
// that every section of those pages belongs to an alert or says it is
// general.
func TestAlertsHaveRunbooks(t *testing.T) {
	files, err := filepath.Glob(runbooksGlob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no runbook pages %s (%v)", runbooksGlob, err)
	}
	type section struct{ page, heading, anchor, body string }
	var sections []section       // the ## sections of every page
	anchors := map[string]bool{} // page + "#" + anchor
	for _, f := range files {
		page := filepath.Base(f)
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range runbookSections(string(doc), func(a string) { anchors[page+"#"+a] = true }) {
			sections = append(sections, section{page, s[0], s[1], s[2]})
		}
	}

	byAnchor := map[string]string{}
	for _, a := range loadAlerts(t) {
		switch sev := a.Labels["severity"]; sev {
		case "critical", "warning":
		default:
			t.Errorf("%s: severity %q, want critical or warning", a.Alert, sev)
		}
		if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("%s: no summary or description", a.Alert)
		}
		target, ok := strings.CutPrefix(a.Annotations["runbook_url"], runbookBase)
		if !ok {
			t.Errorf("%s: runbook_url %q does not start with %s", a.Alert, a.Annotations["runbook_url"], runbookBase)
			continue
		}
		if !anchors[target] {
			t.Errorf("%s: runbook_url %s is no heading of the runbook pages %s", a.Alert, target, runbooksGlob)
		}
		byAnchor[target] = a.Alert
	}
	for _, s := range sections {
		alert, ok := byAnchor[s.page+"#"+s.anchor]
		switch {
		case ok && s.heading != alert:
			t.Errorf("section %q is the runbook of %s; give it the alert's name as its heading", s.heading, alert)
		case !ok && !strings.Contains(s.body, "<!-- general -->"):
			t.Errorf("section %q of %s belongs to no alert; link it from one, or mark it <!-- general -->", s.heading, s.page)
		}
		if ok && !strings.HasPrefix(strings.TrimSpace(s.body), "**What it means.**") {
			t.Errorf("runbook %s does not open with what the alert means (**What it means.**)", s.heading)
		}
	}
}

// runbookSections returns the ## sections of a runbook page as heading,
// anchor and body, and tells anchor every heading's anchor.
func runbookSections(doc string, anchor func(string)) [][3]string {
	seen := map[string]int{}
	var sections [][3]string
	lines := strings.Split(doc, "\n")
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		m := regexp.MustCompile(`^(#{1,6}) +(.+?) *#* *$`).FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		a := githubAnchor(m[2], seen)
		anchor(a)
		if len(m[1]) == 2 {
			end := len(lines)
			for j := i + 1; j < len(lines); j++ {
				if strings.HasPrefix(lines[j], "## ") {
					end = j
					break
				}
			}
			sections = append(sections, [3]string{m[2], a, strings.Join(lines[i+1:end], "\n")})
		}
	}
	return sections
}

// githubAnchor is the id GitHub gives a Markdown heading: the text in
// lower case, without punctuation (what is not a letter, digit, space, '-'
// or '_'), spaces made '-', and "-1", "-2", ... after repeats. Inline
// code marks and links' brackets are punctuation like any other.
func githubAnchor(heading string, seen map[string]int) string {
	// A link's target is not part of its text.
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	a := b.String()
	if n := seen[a]; n > 0 {
		seen[a] = n + 1
		return a + "-" + strconv.Itoa(n)
	}
	seen[a] = 1
	return a
}

func TestGithubAnchor(t *testing.T) {
	seen := map[string]int{}
	for _, tc := range []struct{ heading, want string }{
		{"OutboxRelayDown", "outboxrelaydown"},
		{"What to check", "what-to-check"},
		{"What to check", "what-to-check-1"},
		{"`outboxrelay check` says FAIL", "outboxrelay-check-says-fail"},
		{"Slot lost: WAL removed (wal_status = lost)", "slot-lost-wal-removed-wal_status--lost"},
		{"See [Operations](README.md#operations)", "see-operations"},
	} {
		if got := githubAnchor(tc.heading, seen); got != tc.want {
			t.Errorf("githubAnchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}
