package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWarnings: what the relay warns of at start, each naming the setting
// and the fix, and what it leaves alone.
func TestWarnings(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	dir := t.TempDir()
	file := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open, private := file("open", 0o666), file("private", 0o600)
	local := "postgres://relay@localhost/app?sslmode=disable"
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // each a warning's text in part; nil for none
	}{
		{"nothing to say", Config{Postgres: Postgres{URL: "postgres://relay@db.example.com/app?sslmode=verify-full&sslrootcert=" + private, PasswordFile: private}}, nil},
		{"world-readable password file", Config{Postgres: Postgres{URL: local, PasswordFile: open}},
			[]string{"postgres.password_file: " + open + " has mode 0666, so every user of the machine can read the secret in it; run chmod"}},
		{"each secret file", func() Config {
			var c Config
			c.Postgres.URL, c.Postgres.URLFile = local, open
			c.Kafka.SASL.PasswordFile, c.Kafka.TLS.KeyFile = open, open
			c.SchemaRegistry.PasswordFile, c.SchemaRegistry.TLS.KeyFile = open, open
			return c
		}(), []string{"postgres.url_file: ", "kafka.sasl.password_file: ", "kafka.tls.key_file: ", "schema_registry.password_file: ", "schema_registry.tls.key_file: "}},
		{"sslmode unset, remote host", Config{Postgres: Postgres{URL: "postgres://relay@db.example.com/app"}},
			[]string{"postgres.url: sslmode=prefer (libpq's default when sslmode is unset) goes on without encryption", "to db.example.com in the clear; set sslmode=verify-full"}},
		{"sslmode disable, keyword/value", Config{Postgres: Postgres{URL: "host=10.0.0.7 user=relay sslmode=disable"}},
			[]string{"postgres.url: sslmode=disable never encrypts", "to 10.0.0.7 in the clear"}},
		{"sslmode allow", Config{Postgres: Postgres{URL: "postgres://relay@db.example.com/app?sslmode=allow"}},
			[]string{"sslmode=allow tries without encryption first"}},
		{"sslmode require", Config{Postgres: Postgres{URL: "postgres://relay@db.example.com/app?sslmode=require"}}, nil},
		{"loopback and socket", Config{Postgres: Postgres{URL: "postgres://relay@127.0.0.1,[::1]/app?host=/var/run/postgresql"}}, nil},
		{"kafka insecure_skip_verify", func() Config {
			c := Config{Postgres: Postgres{URL: local}}
			c.Kafka.TLS.Enabled, c.Kafka.TLS.InsecureSkipVerify = true, true
			return c
		}(), []string{"kafka.tls.insecure_skip_verify is true: the brokers' certificates are not checked", "set kafka.tls.ca_file"}},
		{"registry insecure_skip_verify", func() Config {
			c := Config{Postgres: Postgres{URL: local}}
			c.SchemaRegistry.TLS.InsecureSkipVerify = true
			return c
		}(), []string{"schema_registry.tls.insecure_skip_verify is true", "set schema_registry.tls.ca_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.Warnings()
			all := strings.Join(got, "\n")
			if tc.want == nil && len(got) > 0 {
				t.Errorf("warnings, want none:\n%s", all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("no warning says %q; the warnings:\n%s", w, all)
				}
			}
		})
	}
}
