package config

import (
	"fmt"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// Warnings are what the relay runs with but an operator should hear of at
// once, each naming the setting and what to do: a secret file others can
// read, a PostgreSQL connection that may cross the network unencrypted,
// certificates that are not verified. The relay logs each at WARN when it
// starts; `check` says more, having connected.
func (c *Config) Warnings() []string {
	var out []string
	for _, f := range []struct{ key, path string }{
		{"postgres.url_file", c.Postgres.URLFile},
		{"postgres.password_file", c.Postgres.PasswordFile},
		{"kafka.sasl.password_file", c.Kafka.SASL.PasswordFile},
		{"kafka.tls.key_file", c.Kafka.TLS.KeyFile},
		{"schema_registry.password_file", c.SchemaRegistry.PasswordFile},
		{"schema_registry.tls.key_file", c.SchemaRegistry.TLS.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if w := secret.Exposed(f.key, f.path); w != "" {
			out = append(out, w)
		}
	}
	if hosts := pgsql.PlaintextHosts(c.Postgres.URL); len(hosts) > 0 {
		mode := pgsql.SSLMode(c.Postgres.URL)
		how := map[string]string{
			"disable": "never encrypts",
			"allow":   "tries without encryption first",
			"prefer":  "(libpq's default when sslmode is unset) goes on without encryption when the server, or anyone between, declines TLS",
		}[mode]
		out = append(out, fmt.Sprintf("postgres.url: sslmode=%s %s, so the password and every event may cross the network to %s in the clear; set sslmode=verify-full and sslrootcert=<the CA's certificate file> in postgres.url (sslmode=require encrypts without checking the server's identity)",
			mode, how, strings.Join(hosts, ", ")))
	}
	if c.Source == SourcePoll && c.CDC.Cleanup.Enabled {
		out = append(out, "cdc.cleanup.enabled has no effect with source poll, whose rows poll.retention deletes; remove it")
	}
	if c.Kafka.TLS.InsecureSkipVerify {
		out = append(out, "kafka.tls.insecure_skip_verify is true: the brokers' certificates are not checked, so anyone between can pose as a broker and read or change every event; set kafka.tls.ca_file to the CA that signs them (unset, the system's roots) and remove insecure_skip_verify")
	}
	if c.SchemaRegistry.TLS.InsecureSkipVerify {
		out = append(out, "schema_registry.tls.insecure_skip_verify is true: the registry's certificate is not checked, so anyone between can pose as the registry and hand out wrong schemas; set schema_registry.tls.ca_file to the CA that signs it (unset, the system's roots) and remove insecure_skip_verify")
	}
	return out
}
