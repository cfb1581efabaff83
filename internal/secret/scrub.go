package secret

import "strings"

// Scrubber replaces known secrets in text: the last guard behind
// redacting at the source, for the error a library formats with a
// password in it.
type Scrubber struct{ secrets []string }

// NewScrubber scrubs secrets; empty ones are ignored.
func NewScrubber(secrets []string) Scrubber {
	var s Scrubber
	for _, sec := range secrets {
		if sec != "" {
			s.secrets = append(s.secrets, sec)
		}
	}
	return s
}

// Empty reports whether there is nothing to scrub.
func (s Scrubber) Empty() bool { return len(s.secrets) == 0 }

// Scrub replaces every occurrence of a secret in text that is not part of
// a longer word: a password "o" is masked in "u:o@h" but leaves
// "postgres" alone, so that a short secret does not mangle everything
// around it. A secret that starts or ends with something other than a
// letter or digit has no word to be part of on that side.
func (s Scrubber) Scrub(text string) string {
	for _, sec := range s.secrets {
		text = scrubOne(text, sec)
	}
	return text
}

func scrubOne(text, sec string) string {
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, sec)
		if i < 0 {
			break
		}
		end := i + len(sec)
		inWord := (isWordByte(sec[0]) && i > 0 && isWordByte(rest[i-1])) ||
			(isWordByte(sec[len(sec)-1]) && end < len(rest) && isWordByte(rest[end]))
		if b.Cap() == 0 {
			b.Grow(len(text))
		}
		b.WriteString(rest[:i])
		if inWord {
			b.WriteString(sec)
		} else {
			b.WriteString(Mask)
		}
		rest = rest[end:]
	}
	if b.Cap() == 0 {
		return text
	}
	b.WriteString(rest)
	return b.String()
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
