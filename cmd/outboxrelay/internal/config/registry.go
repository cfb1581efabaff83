package config

import (
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/debezium"
)

// SchemaRegistry is the Schema Registry that routing.key_format or
// routing.value_format avro registers its schemas in, as Confluent's
// AvroConverter does (docs/schema-registry.md#avro-with-a-schema-registry).
type SchemaRegistry struct {
	URL                 string            `yaml:"url" doc:"Base URL of a Confluent-compatible Schema Registry (Confluent, Apicurio's ccompat API, Redpanda, Karapace); several, comma-separated, are tried in turn; a user:password@ in it is used for basic auth unless username is set (basic.auth.credentials.source URL). Required with format avro, json_sr or protobuf (schema.registry.url)." default:"(none)"`
	Username            string            `yaml:"username" doc:"User for HTTP basic auth (basic.auth.user.info before the colon)." default:"(none)"`
	Password            Secret            `yaml:"password" doc:"Password for HTTP basic auth; prefer password_file or the environment to writing it here." default:"(none)"`
	PasswordFile        string            `yaml:"password_file" doc:"Read the basic auth password from this file (a mounted secret); a trailing newline is dropped." default:"(none)"`
	TLS                 SchemaRegistryTLS `yaml:"tls"`
	AutoRegister        *bool             `yaml:"auto_register" doc:"Register each schema under its subject; false looks it up instead, and an event whose schema is not there is an error (auto.register.schemas)." default:"true"`
	UseLatestVersion    bool              `yaml:"use_latest_version" doc:"With auto_register false, write every record with the subject's latest schema and its id (use.latest.version)." default:"false"`
	SubjectNameStrategy string            `yaml:"subject_name_strategy" doc:"Subject of a schema: topic (<topic>-key, <topic>-value), record (the schema's full name) or topic_record (<topic>-<full name>), as Confluent's TopicNameStrategy, RecordNameStrategy and TopicRecordNameStrategy." default:"topic"`
	RequestTimeout      time.Duration     `yaml:"request_timeout" doc:"Bound on one request to the registry; one that does not answer in time is tried again with backoff, and no record goes out without its schema." default:"10s"`
}

// SchemaRegistryTLS is TLS to the registry, for https URLs.
type SchemaRegistryTLS struct {
	CAFile             string `yaml:"ca_file" doc:"PEM file of the certificate authorities that sign the registry's certificate." default:"(the system's roots)"`
	CertFile           string `yaml:"cert_file" doc:"PEM client certificate, for a registry that authenticates clients by certificate; needs key_file." default:"(none)"`
	KeyFile            string `yaml:"key_file" doc:"PEM private key of cert_file." default:"(none)"`
	ServerName         string `yaml:"server_name" doc:"Name the registry's certificate must carry." default:"(the URL's host)"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" doc:"Accept any registry certificate: encrypted but not authenticated; for tests only." default:"false"`
}

// registry is the router's part of the section. A user and password in
// a URL (Confluent's basic.auth.credentials.source URL) are taken out of
// it, so that no request URL in a log or an error carries them, and used
// unless username is set.
func (s SchemaRegistry) registry() debezium.RegistryConfig {
	var urls []string
	user, password := s.Username, s.Password.Reveal()
	for _, u := range strings.Split(s.URL, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if p, err := url.Parse(u); err == nil && p.User != nil {
			if user == "" {
				user = p.User.Username()
				password, _ = p.User.Password()
			}
			p.User = nil
			u = p.String()
		}
		urls = append(urls, u)
	}
	return debezium.RegistryConfig{
		URLs:     urls,
		Username: user,
		Password: password,
		TLS: debezium.RegistryTLS{
			CAFile: s.TLS.CAFile, CertFile: s.TLS.CertFile, KeyFile: s.TLS.KeyFile,
			ServerName: s.TLS.ServerName, InsecureSkipVerify: s.TLS.InsecureSkipVerify,
		},
		NoAutoRegister:      s.AutoRegister != nil && !*s.AutoRegister,
		UseLatestVersion:    s.UseLatestVersion,
		SubjectNameStrategy: s.SubjectNameStrategy,
		RequestTimeout:      s.RequestTimeout,
	}
}

// set reports whether any key of the section is set.
func (s SchemaRegistry) set() bool {
	return s != (SchemaRegistry{})
}

// readPassword fills in the password that password_file points to.
func (s *SchemaRegistry) readPassword() error {
	if s.PasswordFile == "" {
		return nil
	}
	if s.Password != "" {
		return errors.New("schema_registry.password and schema_registry.password_file are both set; keep one")
	}
	pw, err := readSecret("schema_registry.password_file", s.PasswordFile)
	if err != nil {
		return err
	}
	s.Password = Secret(pw)
	return nil
}
