package config

import (
	"bytes"
	"fmt"
)

// ReferenceMarker is the line of docs/configuration.md after which the
// page is [Reference]'s table and nothing else. What comes before it is
// prose, written by hand.
const ReferenceMarker = "<!-- Generated below by `go generate ./cmd/outboxrelay/internal/config` from the configuration structs: their doc tags, their defaults and their enumerations; do not edit the table. -->"

// ReferencePage returns page with everything after [ReferenceMarker]
// replaced by the current [Reference] table, so that the page's prose stays
// as written and its table cannot drift from the code.
func ReferencePage(page []byte) ([]byte, error) {
	i := bytes.Index(page, []byte(ReferenceMarker+"\n"))
	if i < 0 {
		return nil, fmt.Errorf("no line %q to put the reference table after", ReferenceMarker)
	}
	head := page[:i+len(ReferenceMarker)+1]
	return append(bytes.Clone(head), Reference()...), nil
}
