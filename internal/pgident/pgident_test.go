package pgident

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // in the error; "" when the name is fine
	}{
		{"plain", "outbox", ""},
		{"quotes, semicolon and spaces are quoted, so fine", `a"b; DROP TABLE x --`, ""},
		{"backslash", `\! ls`, ""},
		{"unicode letters", strings.Repeat("é", 31), ""},
		{"63 bytes", strings.Repeat("t", 63), ""},
		{"empty", "", "is empty"},
		{"line feed", "outbox\nDROP TABLE x; --", "contains a control character (a line feed, U+000A at byte 6)"},
		{"carriage return", "outbox\rDROP", "a carriage return, U+000D"},
		{"tab", "out\tbox", "a tab, U+0009"},
		{"escape", "out\x1b[2Jbox", "an escape, U+001B"},
		{"delete", "out\x7fbox", "a delete, U+007F"},
		{"C1 next line", "out\u0085box", "a control character (U+0085 at byte 3)"},
		{"NUL", "out\x00box", "contains a NUL byte (at byte 3)"},
		{"line separator", "out\u2028box", "a Unicode line or paragraph separator"},
		{"right-to-left override", "out\u202Ebox", "a bidirectional formatting character"},
		{"invalid UTF-8", "out\xc3box", "is not valid UTF-8 (byte 0xc3 at byte 3)"},
		{"64 bytes", strings.Repeat("t", 64), "is 64 bytes long, over PostgreSQL's 63-byte limit on names"},
		{"32 × é is 64 bytes, cut to 31 é as PostgreSQL would", strings.Repeat("é", 32), `keep only “` + strings.Repeat("é", 31) + `” and`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			want := strings.NewReplacer("“", `"`, "”", `"`).Replace(tc.want)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Check(%q) = %v, want it to say %q", tc.in, err, want)
			}
			if !utf8.ValidString(err.Error()) || strings.ContainsAny(err.Error(), "\n\r\x00\x1b") {
				t.Errorf("the error holds the bad character raw: %q", err)
			}
		})
	}
}

func TestCheckKey(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
		parts            []string
		want             string
	}{
		{"fine", "outbox.table", "public.outbox", []string{"public", "outbox"}, ""},
		{"the table part", "outbox.table", "public.out\nbox", []string{"public", "out\nbox"}, `outbox.table: "public.out\nbox" contains a control character (a line feed, U+000A at byte 10)`},
		{"a part too long", "outbox.table", "public." + strings.Repeat("t", 64), []string{"public", strings.Repeat("t", 64)}, `outbox.table: "public.` + strings.Repeat("t", 64) + `": "` + strings.Repeat("t", 64) + `" is 64 bytes long`},
		{"the value itself", "cdc.publication", "pub\r", nil, `cdc.publication: "pub\r" contains a control character (a carriage return, U+000D at byte 3)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckKey(tc.key, tc.value, tc.parts...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckKey = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("CheckKey = %v, want it to start %q", err, tc.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []string
		want  string
	}{
		{"plain", []string{"outbox"}, `"outbox"`},
		{"schema and table", []string{"public", "outbox"}, `"public"."outbox"`},
		{"quote doubled", []string{`a"b`}, `"a""b"`},
		{"backslash kept in a plain identifier", []string{`a\b`}, `"a\b"`},
		{"line feed escaped", []string{"public", "outbox\nDROP TABLE x; --"}, `"public".U&"outbox\000ADROP TABLE x; --"`},
		{"carriage return, quote and backslash in the escape form", []string{"a\r\"\\b"}, `U&"a\000D""\\b"`},
		{"NUL escaped, for PostgreSQL to refuse, not dropped", []string{"a\x00b"}, `U&"a\0000b"`},
		{"bidirectional override escaped", []string{"a\u202Eb"}, `U&"a\202Eb"`},
		{"unicode letters as they are", []string{"é"}, `"é"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Quote(tc.parts...)
			if got != tc.want {
				t.Errorf("Quote(%q) = %s, want %s", tc.parts, got, tc.want)
			}
			for _, r := range got {
				if unsafe(r) != "" || r == 0 {
					t.Errorf("Quote(%q) = %q holds U+%04X raw", tc.parts, got, r)
				}
			}
		})
	}
}

func TestLiteral(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"outboxrelay", `'outboxrelay'`},
		{"it's", `'it''s'`},
		{`a\'b`, `E'a\\''b'`},
		{"chan\nDROP TABLE x; --", `E'chan\u000ADROP TABLE x; --'`},
		{"a\r\\b", `E'a\u000D\\b'`},
		{"a\xffb", "'a\xffb'"},
	} {
		if got := Literal(tc.in); got != tc.want {
			t.Errorf("Literal(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestWithSuffix(t *testing.T) {
	const suffix = "_outboxrelay_unpublished" // 24 bytes
	for _, tc := range []struct {
		name, table, suffix, want string
	}{
		{"short", "outbox", suffix, "outbox" + suffix},
		{"exactly 63", strings.Repeat("t", 39), suffix, strings.Repeat("t", 39) + suffix},
		{"ASCII cut", strings.Repeat("t", 63), suffix, strings.Repeat("t", 39) + suffix},
		// 21 × é is 42 bytes; 39 would end inside the 20th é.
		{"two-byte characters cut before the one that does not fit", strings.Repeat("é", 21), suffix, strings.Repeat("é", 19) + suffix},
		{"three-byte characters", strings.Repeat("€", 20), suffix, strings.Repeat("€", 13) + suffix},
		{"four-byte characters", strings.Repeat("😀", 15), suffix, strings.Repeat("😀", 9) + suffix},
		{"a suffix too long alone is cut", "t", strings.Repeat("s", 70), strings.Repeat("s", 63)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithSuffix(tc.table, tc.suffix)
			if got != tc.want {
				t.Errorf("WithSuffix(%q) = %q, want %q", tc.table, got, tc.want)
			}
			if len(got) > MaxLen || !utf8.ValidString(got) {
				t.Errorf("WithSuffix(%q) = %q: %d bytes, valid UTF-8 %v", tc.table, got, len(got), utf8.ValidString(got))
			}
		})
	}
}
