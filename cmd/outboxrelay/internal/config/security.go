package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/sink"
)

// redacted stands in for a secret wherever one would be shown.
const redacted = secret.Mask

// Secret is a password or another credential. It prints, logs, and
// marshals to YAML and JSON as xxxxx, so a config struct that ends up in a
// log line or a dump shows no secret; Reveal gives the value to the code
// that needs it.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from showing the value.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// LogValue keeps slog from showing the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalYAML keeps a config dump from showing the value.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON keeps JSON output from showing the value.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// KafkaTLS is TLS to the brokers.
type KafkaTLS struct {
	Enabled            bool   `yaml:"enabled" doc:"Connect to the brokers with TLS." default:"false"`
	CAFile             string `yaml:"ca_file" doc:"PEM file of the certificate authorities that sign the brokers' certificates." default:"(the system's roots)"`
	CertFile           string `yaml:"cert_file" doc:"PEM client certificate, for brokers that authenticate clients by certificate (mutual TLS); needs key_file." default:"(none)"`
	KeyFile            string `yaml:"key_file" doc:"PEM private key of cert_file." default:"(none)"`
	ServerName         string `yaml:"server_name" doc:"Name the brokers' certificates must carry." default:"(the broker's host)"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" doc:"Accept any broker certificate: encrypted but not authenticated; for tests only." default:"false"`
}

// KafkaSASL is SASL authentication to the brokers.
type KafkaSASL struct {
	Mechanism    string `yaml:"mechanism" doc:"plain, scram-sha-256 or scram-sha-512; plain needs kafka.tls (or kafka.allow_plaintext_sasl)." default:"(none)"`
	Username     string `yaml:"username" doc:"SASL user name." default:"(none)"`
	Password     Secret `yaml:"password" doc:"SASL password; prefer password_file or the environment to writing it here." default:"(none)"`
	PasswordFile string `yaml:"password_file" doc:"Read the SASL password from this file (a mounted secret); a trailing newline is dropped." default:"(none)"`
}

func (t KafkaTLS) sink() sink.TLS {
	return sink.TLS{
		Enabled:            t.Enabled,
		CAFile:             t.CAFile,
		CertFile:           t.CertFile,
		KeyFile:            t.KeyFile,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
}

func (s KafkaSASL) sink() sink.SASL {
	return sink.SASL{Mechanism: s.Mechanism, Username: s.Username, Password: s.Password.Reveal()}
}

// readSecretFiles fills in the secrets that *_file keys point to.
func (c *Config) readSecretFiles() error {
	var errs []error
	if c.Postgres.URLFile != "" {
		if c.Postgres.URL != "" {
			errs = append(errs, errors.New("postgres.url and postgres.url_file are both set; keep one"))
		} else if s, err := readSecret("postgres.url_file", c.Postgres.URLFile); err != nil {
			errs = append(errs, err)
		} else {
			c.Postgres.URL = s
		}
	}
	if c.Postgres.PasswordFile != "" {
		if pw, err := readSecret("postgres.password_file", c.Postgres.PasswordFile); err != nil {
			errs = append(errs, err)
		} else if c.Postgres.URL != "" {
			u, err := withPassword(c.Postgres.URL, pw)
			if err != nil {
				errs = append(errs, err)
			} else {
				c.Postgres.URL = u
			}
		}
	}
	if c.Kafka.SASL.PasswordFile != "" {
		if c.Kafka.SASL.Password != "" {
			errs = append(errs, errors.New("kafka.sasl.password and kafka.sasl.password_file are both set; keep one"))
		} else if pw, err := readSecret("kafka.sasl.password_file", c.Kafka.SASL.PasswordFile); err != nil {
			errs = append(errs, err)
		} else {
			c.Kafka.SASL.Password = Secret(pw)
		}
	}
	if err := c.SchemaRegistry.readPassword(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// readSecret reads a secret file (secret.ReadFile: bounded, a regular file
// only), without the line break that editors and `kubectl create secret
// --from-file` leave at its end.
func readSecret(key, path string) (string, error) {
	b, err := secret.ReadFile(key, path)
	if err != nil {
		return "", err
	}
	s := secret.TrimLineEnd(b)
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", key, path)
	}
	return s, nil
}

// keywordPassword finds the password of a key=value connection string.
var keywordPassword = regexp.MustCompile(`(^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)

func isURL(conn string) bool {
	return strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://")
}

// withPassword adds pw to a connection string, URL or key=value, that has
// no password of its own.
func withPassword(conn, pw string) (string, error) {
	conflict := errors.New("postgres.password_file is set but postgres.url has a password too; remove the one from the URL")
	if isURL(conn) {
		u, err := url.Parse(conn)
		if err != nil {
			// url's errors quote the URL; say only what is wrong.
			return "", errors.New("postgres.url is not a valid URL; check its escaping (a password belongs in postgres.password_file)")
		}
		if _, has := u.User.Password(); has || u.Query().Has("password") {
			return "", conflict
		}
		u.User = url.UserPassword(u.User.Username(), pw)
		return u.String(), nil
	}
	if keywordPassword.MatchString(conn) {
		return "", conflict
	}
	esc := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
	return strings.TrimSpace(conn) + " password='" + esc + "'", nil
}

// Secrets are the configured secret values: the PostgreSQL password
// (from the URL, or wherever pgx finds it: PGPASSWORD, .pgpass), every
// other secret of the connection string (sslpassword, as secret.Values
// finds them, or PGSSLPASSWORD), the SASL password and the registry's. Log
// output is scrubbed of them (ScrubSecrets).
func (c *Config) Secrets() []string {
	var out []string
	if pc, err := pgconn.ParseConfig(c.Postgres.URL); err == nil && pc.Password != "" {
		// As written in a URL, too.
		out = append(out, pc.Password, url.QueryEscape(pc.Password), url.PathEscape(pc.Password))
	}
	out = append(out, secret.Values(c.Postgres.URL)...)
	if pw := os.Getenv("PGSSLPASSWORD"); pw != "" {
		out = append(out, pw)
	}
	if c.Kafka.SASL.Password != "" {
		out = append(out, c.Kafka.SASL.Password.Reveal())
	}
	if pw := c.SchemaRegistry.registry().Password; pw != "" {
		// From password, password_file or a URL's user part.
		out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
	}
	for _, u := range strings.Split(c.SchemaRegistry.URL, ",") {
		// A URL that does not parse keeps its password (registry).
		out = append(out, secret.Values(strings.TrimSpace(u))...)
	}
	return out
}

// Dump is the effective configuration as YAML, after the file, the
// environment and the defaults, with every secret shown as xxxxx.
//
// It marshals the struct the relay runs with, its defaults filled in by
// each component's own SetDefaults (setDefaults), so it cannot drift from
// what the relay does. Left as written: the Debezium routing keys and
// schema_registry, whose defaults the debezium package keeps to itself,
// and keys whose default depends on the server or on other keys at run
// time (cdc.failover_slot, kafka.max_record_bytes) or means "off".
func (c *Config) Dump() ([]byte, error) {
	d := *c
	d.setDefaults()
	d.Postgres.URL = secret.Redact(c.Postgres.URL)
	d.SchemaRegistry.URL = redactRegistryURLs(c.SchemaRegistry.URL)
	// Worked out from the database and the slot, not a default.
	d.Kafka.TransactionalID = d.TransactionalID() // empty unless exactly_once
	b, err := yaml.Marshal(&d)
	if err != nil {
		return nil, err
	}
	// A last guard: whatever field a secret might have reached, it does
	// not leave in a dump.
	return []byte(secret.NewScrubber(c.Secrets()).Scrub(string(b))), nil
}

// redactRegistryURLs is secret.Redact on each of the comma-separated
// schema_registry.url, so that the others stay readable. The scrub that
// ends Dump cannot be relied on for it: it matches the password only in
// the encodings Secrets lists, and a URL may escape any part of it
// (a!b%40c is a!b@c).
func redactRegistryURLs(urls string) string {
	parts := strings.Split(urls, ",")
	changed := false
	for i, u := range parts {
		if r := secret.Redact(strings.TrimSpace(u)); r != strings.TrimSpace(u) {
			parts[i], changed = r, true
		}
	}
	if !changed {
		return urls
	}
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return strings.Join(parts, ", ")
}

// String is the redacted dump, so that printing a Config (%v, %+v, %s) or
// logging it shows no secret.
func (c Config) String() string {
	b, err := c.Dump()
	if err != nil {
		return "(config: " + err.Error() + ")"
	}
	return string(b)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

// LogValue is String, for slog, whose JSON handler would otherwise marshal
// the fields as they are, connection string and all.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }
