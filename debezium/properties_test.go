package debezium_test

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/debezium"
)

// java.util.Properties.load's format, case by case from its Javadoc.
func TestParseProperties(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     [][2]string
	}{
		{"separators", "a=1\nb:2\nc 3\nd\t=\t4\ne =:5", [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}, {"e", ":5"}}},
		{"comments and blanks", "# c\n  ! c\n\n   \nk=v # not a comment", [][2]string{{"k", "v # not a comment"}}},
		{"no value", "alone\nempty=", [][2]string{{"alone", ""}, {"empty", ""}}},
		{"continuation", "k=one \\\n    two\\\n three", [][2]string{{"k", "one twothree"}}},
		{"even backslashes end the line", "k=a\\\\\nx=y", [][2]string{{"k", `a\`}, {"x", "y"}}},
		{"escapes", `k=tab\tnl\ncr\rff\fq\"u\u00e9\u0041\:\=`, [][2]string{{"k", "tab\tnl\ncr\rff\fq\"uéA:="}}},
		{"escaped separators in keys", `a\=b\:c\ d=v`, [][2]string{{"a=b:c d", "v"}}},
		{"surrogate pair", `k=\ud83d\ude00`, [][2]string{{"k", "😀"}}},
		{"CR LF and CR", "a=1\r\nb=2\rc=3", [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}}},
		{"last wins, first place", "a=1\nb=2\na=3", [][2]string{{"a", "3"}, {"b", "2"}}},
		{"backslash at the end of the file", "k=v\\", [][2]string{{"k", "v"}}},
		{"comment lines do not continue", "# c \\\nk=v", [][2]string{{"k", "v"}}},
		{"Latin-1 file", "k=caf\xe9", [][2]string{{"k", "café"}}},
		{"byte order mark", "\uFEFFk=v", [][2]string{{"k", "v"}}},
		{"routedByValue kept", `r=outbox.event.${routedByValue}`, [][2]string{{"r", "outbox.event.${routedByValue}"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := debezium.ParseProperties([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got [][2]string
			for _, k := range p.Keys() {
				v, _ := p.Get(k)
				got = append(got, [2]string{k, v})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := debezium.ParseProperties([]byte(`k=\u00zz`)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("malformed \\u escape: %v, want an error naming the line", err)
	}
}

func TestParseFileKinds(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		kind     debezium.Kind
		conn     string
		err      string
	}{
		{name: "REST payload", in: `{"name": "outbox", "config": {"connector.class": "x", "tasks.max": 1, "a": true}}`, kind: debezium.ConnectJSON, conn: "outbox"},
		{name: "config object", in: ` {"name": "c2", "connector.class": "x"}`, kind: debezium.ConnectFlatJSON, conn: "c2"},
		{name: "connector properties", in: "name=c3\nconnector.class=x\n", kind: debezium.ConnectProperties, conn: "c3"},
		{name: "Debezium Server", in: "debezium.sink.type=kafka\n", kind: debezium.ServerProperties},
		{name: "nested value", in: `{"config": {"a": {"b": 1}}}`, err: `option "a"`},
		{name: "null value", in: `{"a": null}`, err: "leave the option out"},
		{name: "not JSON", in: `{"a": `, err: "not JSON"},
		{name: "empty", in: "# nothing\n", err: "no options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := debezium.ParseFile([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Kind != tc.kind || f.Name != tc.conn {
				t.Errorf("kind %s name %q, want %s %q", f.Kind, f.Name, tc.kind, tc.conn)
			}
		})
	}
	f, _ := debezium.ParseFile([]byte(`{"config": {"tasks.max": 1, "x": 2.50, "b": false}}`))
	for k, want := range map[string]string{"tasks.max": "1", "x": "2.50", "b": "false"} {
		if v, _ := f.Props.Get(k); v != want {
			t.Errorf("%s = %q, want %q (the number as written)", k, v, want)
		}
	}
}

// escapeProperty writes a key or value so that ParseProperties reads it
// back unchanged.
func escapeProperty(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\' || r == '=' || r == ':' || r == '#' || r == '!':
			b.WriteString(`\` + string(r))
		case r == ' ' && (key || i == 0):
			b.WriteString(`\ `)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\f':
			b.WriteString(`\f`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// FuzzParseFile: no input makes the parser or the translation panic;
// what a file parses to is at most three bytes for each of its own (a
// Latin-1 byte becomes two, an invalid byte in a JSON string the three of
// U+FFFD); the translation's YAML and errors grow at most linearly with
// the file, a few hundred bytes for each byte at worst (a one-letter
// option gets a note of its own); and whatever a properties file parses
// to, written out with escapes, parses back to the same.
//
// Run: go test -run XXX -fuzz FuzzParseFile -fuzztime 10s ./debezium/
func FuzzParseFile(f *testing.F) {
	for _, seed := range []string{
		`{"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname" : "db", "transforms" : "outbox", "transforms.outbox.type" : "io.debezium.transforms.outbox.EventRouter"}`,
		"debezium.sink.type=kafka\ndebezium.source.database.password=${PW:x}\n",
		"name=c\nk=a\\\n  b\n# c\n! d\nx:\\u00e9\n",
		`{"name": "c", "config": {"a": "${env:X}", "b": 1}}`,
		"a\\=b\\ c = d\\\\",
		"transforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\ntransforms.outbox.route.topic.regex=(?<a>.*)\n",
		"transforms=a,b,c,d,e,f\na\nb\nc\nk=caf\xe9\n",
	} {
		f.Add([]byte(seed))
	}
	// The most notes for the fewest bytes: an option of one letter a line.
	var letters strings.Builder
	for r := 'a'; r <= 'z'; r++ {
		letters.WriteString(string(r) + "\n" + strings.ToUpper(string(r)) + "\n")
	}
	f.Add([]byte(letters.String()))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := debezium.ParseFile(data)
		if err != nil {
			return
		}
		parsed := 0
		for _, k := range file.Props.Keys() {
			v, _ := file.Props.Get(k)
			parsed += len(k) + len(v)
		}
		if parsed > 3*len(data) {
			t.Fatalf("%d bytes parsed to %d bytes of keys and values, more than three for each", len(data), parsed)
		}
		tr := debezium.Translate(file, debezium.Env{})
		out, err := tr.YAML(true)
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		if err := tr.Err(); err != nil {
			out = append(out, err.Error()...)
		}
		if limit := 16<<10 + 256*len(data); len(out) > limit {
			t.Fatalf("%d bytes translated to %d bytes of YAML and errors, more than %d", len(data), len(out), limit)
		}
		if file.Kind == debezium.ConnectJSON || file.Kind == debezium.ConnectFlatJSON {
			return
		}
		var b strings.Builder
		for _, k := range file.Props.Keys() {
			v, _ := file.Props.Get(k)
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Fatalf("parsed text is not UTF-8: %q=%q", k, v)
			}
			b.WriteString(escapeProperty(k, true) + "=" + escapeProperty(v, false) + "\n")
		}
		again, err := debezium.ParseProperties([]byte(b.String()))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		if !reflect.DeepEqual(again.Keys(), file.Props.Keys()) {
			t.Fatalf("keys %q, after a round trip %q", file.Props.Keys(), again.Keys())
		}
		for _, k := range again.Keys() {
			v1, _ := file.Props.Get(k)
			v2, _ := again.Get(k)
			if v1 != v2 {
				t.Fatalf("%q = %q, after a round trip %q", k, v1, v2)
			}
		}
	})
}
