package main

import "testing"

// TestStatusURL: status asks the relay where http.listen has it listen,
// on loopback when it listens on every interface.
func TestStatusURL(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{":8080", "http://127.0.0.1:8080/status"},
		{"0.0.0.0:8080", "http://127.0.0.1:8080/status"},
		{"[::]:9090", "http://127.0.0.1:9090/status"},
		{"127.0.0.1:8081", "http://127.0.0.1:8081/status"},
		{"relay.internal:8080", "http://relay.internal:8080/status"},
		{"[::1]:8080", "http://[::1]:8080/status"},
	} {
		if got := statusURL(tc.listen); got != tc.want {
			t.Errorf("statusURL(%q) = %q, want %q", tc.listen, got, tc.want)
		}
	}
}
