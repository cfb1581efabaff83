package app

import "testing"

// written lies in the binary's writable data, which the process has
// changed and a release must leave as it is.
var written = [2]int64{1, 2}

// Releasing drops the binary's read-only pages from the process's resident
// memory and keeps what it wrote.
func TestReleaseBinaryPages(t *testing.T) {
	written[1] = 42
	held, err := releaseBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	after, err := residentFile()
	if err != nil {
		t.Fatal(err)
	}
	if held <= 0 || after >= held {
		t.Errorf("resident file pages: %d KiB before the release, %d KiB after, want fewer after", held>>10, after>>10)
	}
	if written != [2]int64{1, 42} {
		t.Errorf("the binary's writable data reads %v after the release, want [1 42]", written)
	}
}

func TestReadOnlyMapping(t *testing.T) {
	const exe = "/usr/local/bin/outbox relay"
	for _, tc := range []struct {
		line       string
		start, end uint64
		ok         bool
	}{
		{line: "00400000-00fa3000 r-xp 00000000 fe:00 10331562                           /usr/local/bin/outbox relay", start: 0x400000, end: 0xfa3000, ok: true},
		{line: "00fa3000-01bfd000 r--p 00ba3000 fe:00 10331562 /usr/local/bin/outbox relay", start: 0xfa3000, end: 0x1bfd000, ok: true},
		{line: "01bfd000-01c9c000 rw-p 017fd000 fe:00 10331562                           /usr/local/bin/outbox relay"},
		{line: "7f0cf2320000-7f0cf2600000 r--p 00000000 fe:00 1234                       /usr/lib/x86_64-linux-gnu/libc.so.6"},
		{line: "7f0cf2320000-7f0cf2600000 r-xp 00000000 fe:00 1234                       /usr/local/bin/outbox relay (deleted)"},
		{line: "2c56a2400000-2c56a3000000 rw-p 00000000 00:00 0"},
		{line: "7ffc1a5e0000-7ffc1a5e2000 r-xp 00000000 00:00 0                          [vdso]"},
	} {
		start, end, ok := readOnlyMapping(tc.line, exe)
		if start != tc.start || end != tc.end || ok != tc.ok {
			t.Errorf("readOnlyMapping(%q) = %#x, %#x, %v, want %#x, %#x, %v", tc.line, start, end, ok, tc.start, tc.end, tc.ok)
		}
	}
}
