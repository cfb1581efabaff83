package pgoutput

import (
	"bytes"
	"testing"
)

func TestDecodeBytea(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []byte
		bad      bool
	}{
		{name: "hex", in: `\x00ff41`, want: []byte{0, 0xff, 'A'}},
		{name: "empty hex", in: `\x`, want: []byte{}},
		{name: "escape", in: `a\\b\000\377`, want: []byte{'a', '\\', 'b', 0, 0xff}},
		{name: "odd hex", in: `\x0`, bad: true},
		{name: "bad escape", in: `a\9`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBytea([]byte(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("DecodeBytea(%q) = %x, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("DecodeBytea(%q) = %x, %v; want %x", tc.in, got, err, tc.want)
			}
		})
	}
}

func FuzzDecodeBytea(f *testing.F) {
	f.Add([]byte(`\x00ff`))
	f.Add([]byte(`a\\b\001`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := DecodeBytea(in)
		if err == nil && len(out) > len(in) {
			t.Fatalf("decoded %d bytes from %d", len(out), len(in))
		}
	})
}
