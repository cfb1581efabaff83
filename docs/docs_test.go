package docs

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package.
const root = ".."

// pages are the documentation: README.md and every page in docs/, as paths
// relative to the repository.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// link is one link of a page, where it is written.
type link struct {
	line   int
	target string
}

var (
	// inlineLink is [text](target) and ![alt](target), with an optional
	// title; reference is a link reference definition, [name]: target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	reference  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	atxHeading = regexp.MustCompile(`^\s{0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$`)
)

// parsed is what the tests need of a page: its links, its anchors, and its
// text outside code blocks.
type parsed struct {
	links   []link
	anchors map[string]bool
	prose   []string // lines outside fenced code, inline code kept
}

// parse reads a Markdown page as GitHub renders it, as far as links and
// heading anchors go: fenced code is skipped, inline code holds no links.
func parse(page string) parsed {
	p := parsed{anchors: map[string]bool{}}
	seen := map[string]int{}
	addHeading := func(text string) {
		s := slug(text)
		if n, dup := seen[s]; dup {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		p.anchors[s] = true
	}
	lines := strings.Split(page, "\n")
	fence := ""
	prev := "" // the previous line outside a fence, for setext headings
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if f := fenceOf(line); f != "" {
			fence, prev = f, ""
			continue
		}
		p.prose = append(p.prose, line)
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
		} else if prev != "" && !strings.Contains(prev, "|") && (isRun(trimmed, '=') || isRun(trimmed, '-')) {
			// A setext heading: the line above, underlined.
			addHeading(prev)
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		text := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			p.links = append(p.links, link{line: i + 1, target: m[1]})
		}
		if m := reference.FindStringSubmatch(text); m != nil {
			p.links = append(p.links, link{line: i + 1, target: m[1]})
		}
		prev = trimmed
		if atxHeading.MatchString(line) {
			prev = ""
		}
	}
	return p
}

// fenceOf returns the fence (``` or ~~~, three or more) that line opens,
// or "".
func fenceOf(line string) string {
	s := strings.TrimLeft(line, " ")
	if len(line)-len(s) > 3 {
		return ""
	}
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(s) && s[n] == c {
			n++
		}
		if n >= 3 {
			return s[:n]
		}
	}
	return ""
}

func isRun(s string, c rune) bool {
	return s != "" && strings.Trim(s, string(c)) == ""
}

var (
	mdLink  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag = regexp.MustCompile(`<[^>]+>`)
)

// slug is the anchor GitHub gives a heading: the rendered text in lower
// case, without punctuation but for - and _, each space a -. (Duplicates
// get -1, -2, ... in parse.)
func slug(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Switching over", "switching-over"},
		{"Setting up the database: `outboxrelay init`", "setting-up-the-database-outboxrelay-init"},
		{"TLS, SASL and secrets", "tls-sasl-and-secrets"},
		{"Routing: an event becomes a record", "routing-an-event-becomes-a-record"},
		{"1. The outbox table", "1-the-outbox-table"},
		{"What `poll.max_attempts` does", "what-pollmax_attempts-does"},
		{"A [linked](x.md) heading", "a-linked-heading"},
		{"Idle databases: the heartbeat", "idle-databases-the-heartbeat"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
	p := parse("# A\n## A\n## A\n")
	for _, a := range []string{"a", "a-1", "a-2"} {
		if !p.anchors[a] {
			t.Errorf("duplicate headings: no anchor %q in %v", a, p.anchors)
		}
	}
}

// TestDocsLinks resolves every relative link and #anchor of README.md and
// docs/*.md: the file (or directory) must exist inside the repository,
// and an anchor must be a heading of the page it points into.
func TestDocsLinks(t *testing.T) {
	parsedPages := map[string]parsed{}
	load := func(rel string) (parsed, error) {
		if p, ok := parsedPages[rel]; ok {
			return p, nil
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return parsed{}, err
		}
		p := parse(string(data))
		parsedPages[rel] = p
		return p, nil
	}
	checked := 0
	for _, page := range pages(t) {
		p, err := load(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.links {
			if l.target == "" || scheme.MatchString(l.target) {
				continue // a web address; not checked here, it would need the network
			}
			checked++
			where := fmt.Sprintf("%s:%d: link %q", page, l.line, l.target)
			file, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), filepath.FromSlash(file))))
				if target == ".." || strings.HasPrefix(target, "../") || filepath.IsAbs(file) {
					t.Errorf("%s leaves the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
					t.Errorf("%s: %s does not exist", where, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: an anchor into %s, which is not a Markdown page", where, target)
				continue
			}
			tp, err := load(target)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if !tp.anchors[anchor] {
				t.Errorf("%s: %s has no heading #%s; its anchors are: %s", where, target, anchor, strings.Join(slices.Sorted(maps.Keys(tp.anchors)), " "))
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link in README.md and docs/*.md; is the test reading the right files?")
	}
}

// TestReadmeLinksEveryPage: the README is the way into docs/, so every page
// there must be linked from it.
func TestReadmeLinksEveryPage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range parse(string(data)).links {
		file, _, _ := strings.Cut(l.target, "#")
		linked[filepath.ToSlash(filepath.Clean(file))] = true
	}
	for _, page := range pages(t) {
		if page != "README.md" && !linked[page] {
			t.Errorf("README.md does not link %s; add it to the table under Documentation", page)
		}
	}
}

// testName is a test named in the docs: `TestX`, or a subtest path such as
// `TestSources/*/LargeTransactions`.
var testName = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)((?:/[A-Za-z0-9_*]+)*)`")

// TestDocsNameRealTests: a page that says which test shows a behaviour must
// name a test that exists, so renaming or removing one breaks the docs
// here, not in a reader's hands.
func TestDocsNameRealTests(t *testing.T) {
	var sources strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all := sources.String()
	named := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testName.FindAllStringSubmatch(strings.Join(parse(string(data)).prose, "\n"), -1) {
			named++
			if !strings.Contains(all, "func "+m[1]+"(t *testing.T)") {
				t.Errorf("%s names %s, but no test function of that name exists", page, m[0])
				continue
			}
			for _, sub := range strings.Split(strings.TrimPrefix(m[2], "/"), "/") {
				if sub != "" && sub != "*" && !strings.Contains(all, fmt.Sprintf("t.Run(%q", sub)) {
					t.Errorf("%s names %s, but no subtest %q is run anywhere", page, m[0], sub)
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("no page names a test; docs/guarantees.md should")
	}
}

// docsPath is a page of docs/ named in Go source, with its anchor.
var docsPath = regexp.MustCompile(`\bdocs/([a-z0-9][a-z0-9-]*\.md)(?:#([A-Za-z0-9_-]+))?`)

// TestDocsPathsInCode: every docs page a comment, a help text or an error
// message names in the Go source exists, and so does the heading it
// points to, so that the relay never sends a user to a page or section
// that is not there.
func TestDocsPathsInCode(t *testing.T) {
	anchors := map[string]map[string]bool{} // page -> its anchors; nil: no page
	named := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, m := range docsPath.FindAllStringSubmatch(line, -1) {
				named++
				page, anchor := m[1], m[2]
				a, seen := anchors[page]
				if !seen {
					if data, err := os.ReadFile(filepath.Join(root, "docs", page)); err == nil {
						a = parse(string(data)).anchors
					}
					anchors[page] = a
				}
				where := fmt.Sprintf("%s:%d", filepath.ToSlash(path), i+1)
				switch {
				case a == nil:
					t.Errorf("%s names %s, which does not exist", where, m[0])
				case anchor != "" && !a[anchor]:
					t.Errorf("%s names %s, but docs/%s has no heading #%s; its anchors are: %s", where, m[0], page, anchor, strings.Join(slices.Sorted(maps.Keys(a)), " "))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Fatal("found no docs/NAME.md in the Go source; is the test reading the right files?")
	}
}
