package debezium

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzExpand feeds payloads to the expansion of table.expand.json.payload.
// Whatever the text, it returns (no panic, no hang, memory within the
// bounds); a payload over a bound is refused before anything is built;
// and what it expands, the JSON converters write as JSON.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		`{"a": 1, "b": [1, 2], "c": {"d": "x"}}`,
		`{"xs": [{"a": null}, {"a": 5}, {"b": true}]}`,
		`{"xs": [[{"a": 1}], [{"b": 2}]]}`,
		`{"a": 1, "b": 2, "a": 3}`,
		`{"n": 123456789012345678901234567890, "f": 1e999, "i": -2147483649}`,
		`{"s": "\u00e9\ud83d\ude00\\\"", "t": "\xff"}`,
		`[1, 2]`,
		`{"a": 1} trailing [[[[`,
		nested(ExpandMaxDepth),
		nested(ExpandMaxDepth + 1),
	} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, payload string, nullsAsBytes bool) {
		x := expander{nullsAsBytes: nullsAsBytes}
		s, v, err := x.expand("payload", payload)
		limitErr := checkExpandLimits("payload", payload, expandLimits{})
		var le *ExpandLimitError
		if limitErr != nil && (strings.HasPrefix(payload, "{") || strings.HasPrefix(payload, "[")) {
			// The scan decides alone: nothing was built to find out.
			if !errors.As(err, &le) || le.What != limitErr.(*ExpandLimitError).What {
				t.Fatalf("the payload is over a bound (%v), but expand said %v", limitErr, err)
			}
			return
		}
		if err != nil {
			return
		}
		if s == nil || s.Type != TypeStruct {
			t.Fatalf("expanded to %+v, not a struct", s)
		}
		if err := s.validate(v); err != nil {
			t.Fatalf("the value does not fit its own schema: %v", err)
		}
		for _, schemas := range []bool{false, true} {
			out, err := jsonConvert(schemas, s, v)
			if err != nil {
				continue // a value the converter refuses, as Kafka Connect would
			}
			// Jackson writes a double beyond range as Infinity, which is
			// not JSON; anything else must be.
			if !strings.Contains(string(out), "Infinity") && !json.Valid(out) {
				t.Fatalf("json converter (schemas %v) wrote %q", schemas, out)
			}
		}
	})
}
