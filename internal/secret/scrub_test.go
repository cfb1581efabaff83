package secret

import "testing"

func TestScrub(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		secrets    []string
		want       string
	}{
		{"a password in a URL", "postgres://u:s3cret@h/d", []string{"s3cret"}, "postgres://u:xxxxx@h/d"},
		{"a short password leaves words alone", "postgres://u:o@h/d: connect to postgres", []string{"o"}, "postgres://u:xxxxx@h/d: connect to postgres"},
		{"a secret inside a longer word stays", "password=pw1 pw12", []string{"pw1"}, "password=xxxxx pw12"},
		{"every occurrence", "a=tok b=tok", []string{"tok"}, "a=xxxxx b=xxxxx"},
		{"a secret with punctuation at its edge", "x:p@ss!@h", []string{"p@ss!"}, "x:xxxxx@h"},
		{"nothing to scrub", "plain", []string{""}, "plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewScrubber(tc.secrets).Scrub(tc.text); got != tc.want {
				t.Errorf("Scrub(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}
