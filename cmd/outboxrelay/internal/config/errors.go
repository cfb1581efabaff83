package config

import (
	"errors"
	"strings"
)

// joinDistinct is errors.Join over the individual problems in errs: joined
// errors are taken apart, nils dropped, and a problem reported by two
// checks (both sources check postgres.url, for one) is kept once, so the
// user reads a list of distinct problems, one a line.
func joinDistinct(errs ...error) error {
	var out []error
	seen := map[string]bool{}
	var add func(error)
	add = func(err error) {
		if err == nil {
			return
		}
		if parts, ok := joined(err); ok {
			for _, e := range parts {
				add(e)
			}
			return
		}
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			out = append(out, err)
		}
	}
	for _, err := range errs {
		add(err)
	}
	return errors.Join(out...)
}

// joined returns the parts of an error made by errors.Join: one whose
// message is its parts' messages, a line each. fmt.Errorf with several %w
// also has parts, but its message adds context that splitting would lose,
// so it stays whole.
func joined(err error) ([]error, bool) {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil, false
	}
	parts := j.Unwrap()
	msgs := make([]string, 0, len(parts))
	for _, e := range parts {
		if e != nil {
			msgs = append(msgs, e.Error())
		}
	}
	return parts, err.Error() == strings.Join(msgs, "\n")
}
