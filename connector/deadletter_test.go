package connector

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFitDeadLetter: a dead letter record too large for its topic loses,
// in order and only as far as it must, its value, a large key, the excess
// of its error and topic headers, and then any key; each loss leaves a
// marker with the size of what was there; the id header always stays.
func TestFitDeadLetter(t *testing.T) {
	const id = "0b7e8a52-5b1c-4d1e-9d7a-2f1c3e4d5a6b"
	big := func(n int) []byte { return []byte(strings.Repeat("x", n)) }
	msg := func(key, value []byte, errText, topic string) *Message {
		m := &Message{Topic: "dl", Key: key, Value: value, EventID: id, Headers: []Header{
			{Key: "id", Value: []byte(id)},
			{Key: HeaderError, Value: []byte(errText)},
		}}
		if topic != "" {
			m.Headers = append(m.Headers, Header{Key: HeaderOriginalTopic, Value: []byte(topic)})
		}
		return m
	}
	const mib = 1 << 20
	hugeTopic := "outbox.event." + strings.Repeat("bad topic ", 200_000)
	tests := []struct {
		name  string
		m     *Message
		limit int
		fits  bool
		// markers are the omitted-markers wanted, with their values.
		markers map[string]string
		key     bool // the key is kept
		value   bool // the value is kept
	}{
		{
			name:  "fits as it is",
			m:     msg([]byte("a"), big(1000), "bad topic", "outbox.event.order"),
			limit: mib, fits: true, key: true, value: true,
		},
		{
			name:    "large value",
			m:       msg([]byte("a"), big(2*mib), "topic name has ' '", "outbox.event.a b"),
			limit:   mib,
			fits:    true,
			markers: map[string]string{HeaderOmittedValue: strconv.Itoa(2 * mib)},
			key:     true,
		},
		{
			name:    "large key, value already left out",
			m:       msg(big(2*mib), nil, "record is 2097300 bytes, more than the broker's limit", "outbox.event.order"),
			limit:   mib,
			fits:    true,
			markers: map[string]string{HeaderOmittedKey: strconv.Itoa(2 * mib)},
		},
		{
			name:  "large key and value",
			m:     msg(big(2*mib), big(2*mib), "bad", "outbox.event.order"),
			limit: mib,
			fits:  true,
			markers: map[string]string{
				HeaderOmittedValue: strconv.Itoa(2 * mib), HeaderOmittedKey: strconv.Itoa(2 * mib),
			},
		},
		{
			name:  "key over the bound but the record fits once the value is gone",
			m:     msg(big(4000), big(2*mib), "bad", "outbox.event.order"),
			limit: mib,
			fits:  true, key: true,
			markers: map[string]string{HeaderOmittedValue: strconv.Itoa(2 * mib)},
		},
		{
			name:  "huge topic name quoted in the error and the topic header",
			m:     msg([]byte("a"), big(2*mib), "topic name \""+hugeTopic+"\" has ' '", hugeTopic),
			limit: mib,
			fits:  true, key: true,
			markers: map[string]string{
				HeaderOmittedValue: strconv.Itoa(2 * mib),
				HeaderOmittedError: strconv.Itoa(len(hugeTopic) + len("topic name \"\" has ' '")),
				HeaderOmittedTopic: strconv.Itoa(len(hugeTopic)),
			},
		},
		{
			name:  "small key dropped last, when nothing else is left",
			m:     msg(big(900), nil, strings.Repeat("e", 2000), "outbox.event.order"),
			limit: 1400,
			fits:  true,
			markers: map[string]string{
				HeaderOmittedError: "2000", HeaderOmittedKey: "900",
			},
		},
		{
			name:  "cannot fit: the id header alone is over the limit",
			m:     msg([]byte("a"), big(10), "bad", ""),
			limit: 100,
			fits:  false,
			markers: map[string]string{
				HeaderOmittedValue: "10", HeaderOmittedKey: "1",
			},
		},
		{
			name:  "limit unknown: the smallest record, small key kept",
			m:     msg([]byte("a"), big(10), strings.Repeat("e", 5000), "outbox.event.order"),
			limit: 0,
			fits:  true, key: true,
			markers: map[string]string{
				HeaderOmittedValue: "10", HeaderOmittedError: "5000",
			},
		},
		{
			name:  "limit unknown: large key left out",
			m:     msg(big(2*mib), nil, "record too large", "outbox.event.order"),
			limit: 0,
			fits:  true,
			markers: map[string]string{
				HeaderOmittedKey: strconv.Itoa(2 * mib),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fits := fitDeadLetter(tc.m, tc.limit)
			if fits != tc.fits {
				t.Fatalf("fits = %v, want %v (size %d, limit %d)", fits, tc.fits, tc.m.Size(), tc.limit)
			}
			if fits && tc.limit > 0 && tc.m.Size() > tc.limit {
				t.Errorf("said it fits, but is %d bytes, over %d", tc.m.Size(), tc.limit)
			}
			got := map[string]string{}
			for _, h := range tc.m.Headers {
				if strings.HasPrefix(h.Key, "outboxrelay.omitted.") {
					got[h.Key] = string(h.Value)
				}
			}
			if len(got) != len(tc.markers) {
				t.Errorf("markers %v, want %v", got, tc.markers)
			}
			for k, v := range tc.markers {
				if got[k] != v {
					t.Errorf("marker %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if (tc.m.Key != nil) != tc.key {
				t.Errorf("key kept: %v, want %v", tc.m.Key != nil, tc.key)
			}
			if (tc.m.Value != nil) != tc.value {
				t.Errorf("value kept: %v, want %v", tc.m.Value != nil, tc.value)
			}
			if h := header(tc.m, "id"); h != id {
				t.Errorf("id header %q, want %q", h, id)
			}
			for k, marker := range map[string]string{HeaderError: HeaderOmittedError, HeaderOriginalTopic: HeaderOmittedTopic} {
				if v := header(tc.m, k); got[marker] != "" && (len(v) > DeadLetterHeaderBytes || !utf8.ValidString(v)) {
					t.Errorf("%s cut to %d bytes (valid UTF-8: %v); want at most %d", k, len(v), utf8.ValidString(v), DeadLetterHeaderBytes)
				}
			}
		})
	}
}

func header(m *Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestCutUTF8: a header or log text is cut on a character boundary, so
// what is kept is still valid UTF-8.
func TestCutUTF8(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short", "abc", 10, "abc"},
		{"ascii", "abcdef", 3, "abc"},
		{"inside a two-byte character", "aé", 2, "a"},
		{"after a two-byte character", "éa", 2, "é"},
		{"inside a four-byte character", "ab😀", 4, "ab"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s[:cutUTF8([]byte(tc.s), tc.n)]; got != tc.want {
				t.Errorf("cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
	if got := Shorten(strings.Repeat("é", 100), 5); got != "éé… (200 bytes in all)" {
		t.Errorf("Shorten = %q", got)
	}
}
