package config

import (
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/debezium"
)

// TestSchemaRegistrySection maps schema_registry onto the router's
// registry settings: the URLs split, the password read from its file (and
// scrubbed from logs), auto_register true unless set false; and refuses the
// section where no format avro uses it, or a password given twice.
func TestSchemaRegistrySection(t *testing.T) {
	pw := writeSecret(t, "registry", hardPassword+"\n")
	base := "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9092]\n"
	c, err := Load(writeFile(t, base+"routing:\n  value_format: avro\nschema_registry:\n  url: http://a:8081, http://b:8081\n  username: relay\n  password_file: "+pw+"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := c.DebeziumRouter()
	if rc == nil || rc.ValueFormat != debezium.FormatAvro {
		t.Fatalf("router %+v, want value format avro", rc)
	}
	got := rc.Registry
	if strings.Join(got.URLs, " ") != "http://a:8081 http://b:8081" || got.Username != "relay" || got.Password != hardPassword || got.NoAutoRegister {
		t.Errorf("registry settings %+v", got)
	}
	found := false
	for _, s := range c.Secrets() {
		found = found || s == hardPassword
	}
	if !found {
		t.Errorf("the registry password is not among the secrets scrubbed from logs")
	}
	dump, err := c.Dump()
	if err != nil || strings.Contains(string(dump), hardPassword) {
		t.Errorf("the config dump shows the registry password (%v):\n%s", err, dump)
	}

	c, err = Load(writeFile(t, base+"routing:\n  key_format: avro\n"), []string{
		"OUTBOXRELAY_SCHEMA_REGISTRY_URL=https://r:8081", "OUTBOXRELAY_SCHEMA_REGISTRY_AUTO_REGISTER=false",
		"OUTBOXRELAY_SCHEMA_REGISTRY_USE_LATEST_VERSION=true", "OUTBOXRELAY_SCHEMA_REGISTRY_SUBJECT_NAME_STRATEGY=topic",
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.DebeziumRouter().Registry; !r.NoAutoRegister || !r.UseLatestVersion || r.URLs[0] != "https://r:8081" {
		t.Errorf("from the environment: %+v", r)
	}

	// basic.auth.credentials.source URL: the user in the URL is taken
	// out of it, and its password scrubbed like the others.
	c, err = Load(writeFile(t, base+"routing:\n  value_format: avro\nschema_registry:\n  url: https://relay:s%40cret@r:8081\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.DebeziumRouter().Registry; r.URLs[0] != "https://r:8081" || r.Username != "relay" || r.Password != "s@cret" {
		t.Errorf("credentials in the URL: %+v", r)
	}
	if dump, _ := c.Dump(); strings.Contains(string(dump), "cret") {
		t.Errorf("the dump shows the password of the registry URL:\n%s", dump)
	}

	for _, tc := range []struct{ name, yaml, want string }{
		{"section without avro", "schema_registry:\n  url: http://r:8081\n", "neither routing.key_format nor routing.value_format is avro"},
		{"section with other formats", "routing:\n  value_format: json\nschema_registry:\n  url: http://r:8081\n", "neither routing.key_format nor routing.value_format is avro"},
		{"avro without url", "routing:\n  value_format: avro\n", "needs schema_registry.url"},
		{"password twice", "routing:\n  value_format: avro\nschema_registry:\n  url: http://r:8081\n  username: u\n  password: x\n  password_file: " + pw + "\n", "password and schema_registry.password_file are both set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, base+tc.yaml), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestDumpHidesRegistryURLPassword shows xxxxx for the password of each
// schema_registry.url however it is escaped: the scrub behind Dump knows
// only some encodings, and a!b%40c (a!b@c, partly escaped) was none of them.
func TestDumpHidesRegistryURLPassword(t *testing.T) {
	base := "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9092]\nrouting:\n  value_format: avro\n"
	for _, tc := range []struct{ name, url, want, secret string }{
		{"partly escaped", "https://reg:a!b%40c@registry:8081", "url: https://reg:xxxxx@registry:8081", "a!b"},
		{"escaped otherwise", "https://reg:p%61ss%2Fw@registry:8081", "url: https://reg:xxxxx@registry:8081", "%61ss"},
		{"several URLs", "https://a:8081, https://reg:s%21cret@b:8081", "url: https://a:8081, https://reg:xxxxx@b:8081", "cret"},
		{"not a valid URL", "https://reg:p w%zz@registry:8081", "url: https://reg:xxxxx@registry:8081", "p w"},
		{"user without password", "https://reg@registry:8081", "url: https://reg@registry:8081", "\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Read(writeFile(t, base+"schema_registry:\n  url: "+tc.url+"\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			dump, err := c.Dump()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(dump), tc.want) || strings.Contains(string(dump), tc.secret) {
				t.Errorf("dump shows schema_registry.url as\n%s\nwant %q", grepLine(string(dump), "url: https"), tc.want)
			}
		})
	}
}

// grepLine is the first line of s that contains sub.
func grepLine(s, sub string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
