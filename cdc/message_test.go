package cdc

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

func TestMessageEvent(t *testing.T) {
	cols := connector.ColumnMap{}.WithDefaults()
	for _, tc := range []struct {
		name    string
		content string
		cols    connector.ColumnMap
		// want is id|aggregatetype|aggregateid|type|payload|text, or the
		// error's words.
		want, wantErr string
		extra         string // name=value;... of the extra columns
	}{
		{name: "object payload", content: `{"id":"1","aggregatetype":"order","aggregateid":"a","type":"T","payload":{"b": 2, "a":1}}`,
			want: `1|order|a|T|{"b": 2, "a":1}|false`},
		{name: "string payload is its text", content: `{"id":"1","aggregatetype":"order","aggregateid":"a","type":"T","payload":"x\"y"}`,
			want: `1|order|a|T|x"y|true`},
		{name: "number ids", content: `{"id":7,"aggregatetype":"order","aggregateid":42,"payload":[1]}`,
			want: `7|order|42||[1]|false`},
		{name: "null type and payload", content: `{"id":"1","aggregatetype":"order","aggregateid":"a","type":null,"payload":null}`,
			want: `1|order|a||<nil>|false`},
		{name: "headers and other keys are extra columns", content: ` {"id":"1","aggregatetype":"o","aggregateid":"a","tenant":"t","headers":{"traceparent":"00-x"},"n":3}`,
			want: `1|o|a||<nil>|false`, extra: `headers={"traceparent":"00-x"};n=3;tenant=t`},
		{name: "keys are outbox.columns' names", cols: connector.ColumnMap{ID: "event_id"}.WithDefaults(),
			content: `{"event_id":"e","aggregatetype":"o","aggregateid":"a"}`, want: `e|o|a||<nil>|false`},
		{name: "keys match exactly", content: `{"ID":"1","aggregatetype":"o","aggregateid":"a"}`, wantErr: `"id" is missing or null`},
		{name: "not JSON", content: `hello`, wantErr: "not a JSON object"},
		{name: "array", content: `[1]`, wantErr: "not a JSON object"},
		{name: "broken JSON", content: `{"id":`, wantErr: "not valid JSON"},
		{name: "missing aggregate", content: `{"id":"1","aggregatetype":"o"}`, wantErr: `"aggregateid" is missing or null`},
		{name: "object id", content: `{"id":{},"aggregatetype":"o","aggregateid":"a"}`, wantErr: `"id" is {}, not a string`},
		{name: "headers not strings", content: `{"id":"1","aggregatetype":"o","aggregateid":"a","headers":{"n":1}}`, wantErr: `"headers" must be an object of strings`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cols
			if tc.cols != (connector.ColumnMap{}) {
				c = tc.cols
			}
			at := &connector.LogicalMessage{Prefix: "outbox", LSN: 1}
			e := messageEvent(c, []byte(tc.content), at, time.Unix(0, 0), "commit 0/1")
			if tc.wantErr != "" {
				if e.Invalid == nil || !strings.Contains(e.Invalid.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", e.Invalid, tc.wantErr)
				}
				if !strings.Contains(e.Invalid.Error(), `message "outbox"`) || string(e.Payload) != tc.content {
					t.Errorf("error %v does not name the message, or payload %q is not the content", e.Invalid, e.Payload)
				}
				return
			}
			if e.Invalid != nil {
				t.Fatal(e.Invalid)
			}
			payload := "<nil>"
			if e.Payload != nil {
				payload = string(e.Payload)
			}
			got := strings.Join([]string{e.ID, e.AggregateType, e.AggregateID, e.Type, payload}, "|") + "|" + map[bool]string{true: "true", false: "false"}[at.PayloadText]
			if got != tc.want {
				t.Errorf("event %s, want %s", got, tc.want)
			}
			if e.Type == "" && !e.TypeNull {
				t.Error("no type, but TypeNull is false")
			}
			var extra []string
			for _, x := range e.Extra {
				extra = append(extra, x.Name+"="+string(x.Value))
			}
			if strings.Join(extra, ";") != tc.extra {
				t.Errorf("extra columns %q, want %q", strings.Join(extra, ";"), tc.extra)
			}
		})
	}
}
