package debezium

import (
	"strings"
	"testing"
)

func TestSpanContextForms(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tc := range []struct {
		name    string
		text    string
		want    []headerValue
		wantErr string
	}{
		{name: "Properties text", text: "#Thu May 02 10:00:00 UTC 2024\ntraceparent=" + tp + "\ntracestate=k=v\n",
			want: []headerValue{{"traceparent", tp}, {"tracestate", "k=v"}}},
		{name: "bare traceparent", text: tp, want: []headerValue{{"traceparent", tp}}},
		{name: "bare traceparent with a newline", text: tp + "\n", want: []headerValue{{"traceparent", tp}}},
		{name: "headers object", text: `{"tenant": "a", "tracestate": "k=v", "traceparent": "` + tp + `"}`,
			want: []headerValue{{"traceparent", tp}, {"tracestate", "k=v"}}},
		{name: "headers object without traceparent", text: `{"tenant": "a"}`, wantErr: "no traceparent entry"},
		{name: "headers object, bad traceparent", text: `{"traceparent": "01-x"}`, wantErr: `traceparent "01-x" is not a valid W3C traceparent`},
		{name: "broken object", text: `{"traceparent": `, wantErr: "span context: headers object"},
		{name: "all-zero trace id", text: "00-00000000000000000000000000000000-b7ad6b7169203331-01", wantErr: "is not a valid W3C traceparent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := spanContext([]byte(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("headers = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("header %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
