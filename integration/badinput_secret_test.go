package integration

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The secrets of the tests below: the client key's passphrase in
// postgres.url, and the password of a Schema Registry URL that Go's URL
// parser refuses (%zz is no escape).
const (
	sslSecret      = "SEKRET1"
	registrySecret = "SEKRET2"
	badRegistryURL = "https://reg:" + registrySecret + "%zz@registry.invalid:8081"
)

// withQuery adds key=value to a URL's query, as written.
func withQuery(t *testing.T, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	sep := "&"
	if u.RawQuery == "" {
		sep = ""
	}
	u.RawQuery += sep + key + "=" + value
	return u.String()
}

// assertNoSecret fails when out shows either secret.
func assertNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{sslSecret, registrySecret} {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the secret %s:\n%s", what, s, out)
		}
	}
}

// TestBadInputSecretNotPrinted: with sslpassword in postgres.url, and then
// also a registry URL that does not parse, config-dump, check, run and
// debezium translate (and run --debezium-config) print neither secret,
// where they once printed the passphrase as written and the registry URL
// whole. The user sees the connection string with
// sslpassword=xxxxx, and an error naming the bad registry URL with its
// password masked.
func TestBadInputSecretNotPrinted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pgURL := testenv.Postgres(t)
	pool := connectPool(t, pgURL)
	createOutbox(t, pool, "public.outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	withSSL := withQuery(t, pgURL, "sslpassword", sslSecret)
	good := yamlConfig(withSSL, brokers, "cdc:\n  slot: "+name+"\n  publication: "+name+"\n")
	bad := good + "routing:\n  value_format: avro\nschema_registry:\n  url: \"" + badRegistryURL + "\"\n"
	goodPath := writeTemp(t, "good.yaml", good)
	badPath := writeTemp(t, "bad.yaml", bad)

	t.Run("config-dump", func(t *testing.T) {
		out, code := runCommand(t, nil, "config-dump", "--config", goodPath)
		assertNoSecret(t, "config-dump", out)
		if code != 0 || !strings.Contains(out, "sslpassword=xxxxx") {
			t.Errorf("config-dump exited %d; want 0 and the URL with sslpassword=xxxxx:\n%s", code, out)
		}
		out, code = runCommand(t, nil, "config-dump", "--config", badPath)
		assertNoSecret(t, "config-dump of the bad registry URL", out)
		if code != 1 || !strings.Contains(out, `schema_registry.url "https://reg:xxxxx@registry.invalid:8081" is not a valid URL`) {
			t.Errorf("config-dump exited %d; want 1 and the registry URL named, password masked:\n%s", code, out)
		}
	})
	t.Run("check", func(t *testing.T) {
		out, _ := runCommand(t, nil, "check", "--config", goodPath, "--timeout", "20s")
		assertNoSecret(t, "check", out)
		if !strings.Contains(out, "sslpassword=xxxxx") {
			t.Errorf("check does not name the connection string with sslpassword=xxxxx:\n%s", out)
		}
		out, code := runCommand(t, nil, "check", "--config", badPath)
		assertNoSecret(t, "check of the bad registry URL", out)
		if code != 1 || !strings.Contains(out, "is not a valid URL") {
			t.Errorf("check exited %d; want 1 and the registry URL refused:\n%s", code, out)
		}
	})
	t.Run("run", func(t *testing.T) {
		p := runBinary(t, good)
		waitLog(t, p, "outboxrelay starting", time.Minute)
		if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("outboxrelay exited with %d after SIGTERM", code)
		}
		out := p.out.String()
		assertNoSecret(t, "run", out)
		if !strings.Contains(out, "sslpassword=xxxxx") {
			t.Errorf("the start line does not name the connection string with sslpassword=xxxxx:\n%s", out)
		}
		p = runBinary(t, bad)
		if code := p.exit(t, time.Minute); code != 1 {
			t.Errorf("run of the bad registry URL exited %d, want 1", code)
		}
		assertNoSecret(t, "run of the bad registry URL", p.out.String())
	})
	t.Run("debezium", func(t *testing.T) {
		if _, err := pool.Exec(ctx, outboxEventDDL); err != nil {
			t.Fatal(err)
		}
		debeziumSlot(ctx, t, pool, name+"_dbz")
		conn := exampleConnector(pgURL, name+"_dbz", `, "database.sslpassword": "`+sslSecret+`"`)
		badConn := exampleConnector(pgURL, name+"_dbz", `, "database.sslpassword": "`+sslSecret+`", "value.converter": "io.confluent.connect.avro.AvroConverter", "value.converter.schema.registry.url": "`+badRegistryURL+`"`)
		goodFile, badFile := writeTemp(t, "good.json", conn), writeTemp(t, "bad.json", badConn)

		out, code := runCommand(t, nil, "debezium", "translate", goodFile)
		assertNoSecret(t, "debezium translate", out)
		if code != 0 || !strings.Contains(out, "database.sslpassword (info)") {
			t.Errorf("debezium translate exited %d; want 0 and a note on database.sslpassword:\n%s", code, out)
		}
		out, code = runCommand(t, nil, "debezium", "translate", badFile)
		assertNoSecret(t, "debezium translate of the bad registry URL", out)
		if code != 1 || !strings.Contains(out, `"https://reg:xxxxx@registry.invalid:8081" is not a valid URL`) {
			t.Errorf("debezium translate exited %d; want 1 and the registry URL refused, password masked:\n%s", code, out)
		}
		env := "OUTBOXRELAY_KAFKA_BROKERS=" + strings.Join(brokers, ",")
		p := runDebeziumBinary(t, "good.json", conn, env)
		waitLog(t, p, "outboxrelay starting", time.Minute)
		if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("outboxrelay exited with %d after SIGTERM", code)
		}
		assertNoSecret(t, "run --debezium-config", p.out.String())
		p = runDebeziumBinary(t, "bad.json", badConn, env)
		if code := p.exit(t, time.Minute); code != 1 {
			t.Errorf("run --debezium-config of the bad registry URL exited %d, want 1", code)
		}
		assertNoSecret(t, "run --debezium-config of the bad registry URL", p.out.String())
	})
}

// TestBadInputSecretFileRefused: a secret file that is a device (read
// without end: /dev/urandom took 205 MB in 2 s) or a FIFO (which waits for
// a writer) is refused at once, naming the key and the path, by every
// command that loads the configuration.
func TestBadInputSecretFileRefused(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"device", "postgres:\n  url: postgres://relay@db/app\n  password_file: /dev/urandom\nkafka:\n  brokers: [k:9092]\n",
			"postgres.password_file: /dev/urandom is a character device, not a regular file"},
		{"FIFO", "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9092]\n  sasl:\n    mechanism: scram-sha-256\n    username: relay\n    password_file: " + fifo + "\n",
			"kafka.sasl.password_file: " + fifo + " is a named pipe (FIFO), not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, "outboxrelay.yaml", tc.yaml)
			for _, cmd := range []string{"config-dump", "run"} {
				// runCommand's own bound (a minute) stops a command
				// that reads on; the old code reached gigabytes by then.
				out, code := runSecretFileCommand(t, cmd, path)
				if code != 1 || !strings.Contains(out, tc.want) {
					t.Errorf("%s exited %d; want 1 and an error saying %q:\n%.2000s", cmd, code, tc.want, out)
				}
			}
		})
	}
}

// runSecretFileCommand runs the binary's cmd on the config at path, killed
// after 20 s: a secret file read without bound must not fill the
// machine's memory before the test gives up.
func runSecretFileCommand(t *testing.T, cmd, path string) (string, int) {
	t.Helper()
	p := startBinary(t, []string{cmd, "--config", path})
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		t.Errorf("%s did not refuse the secret file within 20 s (killed)", cmd)
	}
	return p.out.String(), p.cmd.ProcessState.ExitCode()
}

// TestBadInputSecretFileWarning: a password file every user can read
// (0666) is used, and the relay says so at start with a WARN naming the
// key, the file and the chmod to run; it used to take it without a word.
func TestBadInputSecretFileWarning(t *testing.T) {
	t.Parallel()
	pgURL := testenv.Postgres(t)
	pool := connectPool(t, pgURL)
	createOutbox(t, pool, "public.outbox")
	_, brokers := testenv.Kafka(t)
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	// The password moves to the file (the test server may not ask for it).
	pw, _ := u.User.Password()
	if pw == "" {
		pw = "unused-by-a-trusting-server"
	}
	u.User = url.User(u.User.Username())
	pwFile := filepath.Join(t.TempDir(), "postgres-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pwFile, 0o666); err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	p := runBinary(t, yamlConfig(u.String(), brokers, "cdc:\n  slot: "+name+"\n  publication: "+name+"\n"),
		"OUTBOXRELAY_POSTGRES_PASSWORD_FILE="+pwFile)
	want := "postgres.password_file: " + pwFile + " has mode 0666, so every user of the machine can read the secret in it; run chmod "
	waitLog(t, p, want, time.Minute)
	// A warning, not a refusal: the relay starts.
	waitLog(t, p, "outboxrelay starting", time.Minute)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("outboxrelay exited with %d after SIGTERM", code)
	}
	var line string
	for l := range strings.SplitSeq(p.out.String(), "\n") {
		if strings.Contains(l, want) {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") {
		t.Errorf("the warning is not logged at WARN: %s", line)
	}
}
