// Package docker holds the container files; its tests keep them in step
// with the code and with each other, and build the image where podman is
// installed.
package docker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// compose is the part of compose.yaml the tests read.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Build       struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) compose {
	t.Helper()
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("compose.yaml does not parse: %v", err)
	}
	return c
}

func TestCompose(t *testing.T) {
	c := readCompose(t)
	for _, name := range []string{"postgres", "kafka", "outboxrelay"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("compose.yaml has no service %q", name)
		}
	}
	pg, kafka, relay := c.Services["postgres"], c.Services["kafka"], c.Services["outboxrelay"]

	if !slices.Contains(pg.Command, "wal_level=logical") {
		t.Errorf("postgres runs %v, without -c wal_level=logical", pg.Command)
	}
	if !strings.HasPrefix(pg.Image, "postgres:") {
		t.Errorf("postgres image %q", pg.Image)
	}
	if roles := kafka.Environment["KAFKA_PROCESS_ROLES"]; !strings.Contains(roles, "controller") || !strings.Contains(roles, "broker") {
		t.Errorf("kafka is not a KRaft broker and controller: KAFKA_PROCESS_ROLES=%q", roles)
	}
	for k := range kafka.Environment {
		if strings.Contains(k, "ZOOKEEPER") {
			t.Errorf("kafka has %s; KRaft mode needs no ZooKeeper", k)
		}
	}

	// Every file compose mounts or builds from exists.
	for _, svc := range []string{"postgres", "outboxrelay"} {
		for _, v := range c.Services[svc].Volumes {
			src, _, _ := strings.Cut(v, ":")
			if _, err := os.Stat(src); err != nil {
				t.Errorf("%s mounts %s: %v", svc, src, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(relay.Build.Context, relay.Build.Dockerfile)); err != nil {
		t.Errorf("outboxrelay builds from %s in %s: %v", relay.Build.Dockerfile, relay.Build.Context, err)
	}
	if !slices.Contains(relay.Volumes, "./config.yaml:/etc/outboxrelay/config.yaml:ro") {
		t.Errorf("outboxrelay does not mount ./config.yaml where the image's CMD reads it: %v", relay.Volumes)
	}
	for _, dep := range []string{"postgres", "kafka"} {
		if relay.DependsOn[dep].Condition != "service_healthy" {
			t.Errorf("outboxrelay does not wait for %s to be healthy", dep)
		}
	}

	// The relay's configuration, as compose gives it, loads and points
	// at the services compose runs.
	var environ []string
	for k, v := range relay.Environment {
		environ = append(environ, k+"="+v)
	}
	dump := exec.Command(testenv.Binary(t), "config-dump", "--config", "config.yaml")
	dump.Env = environ
	out, err := dump.CombinedOutput()
	if err != nil {
		t.Fatalf("config.yaml with compose's environment: %v\n%s", err, out)
	}
	var cfg struct {
		Outbox struct{ Table string }
		CDC    struct{ Publication string }
		Kafka  struct{ Brokers []string }
		HTTP   struct{ Listen string }
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("config-dump: %v\n%s", err, out)
	}
	// config-dump hides the password, which init.sql must match: the URL
	// as compose sets it.
	u, err := url.Parse(relay.Environment["OUTBOXRELAY_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "postgres" || u.Port() != "5432" || strings.TrimPrefix(u.Path, "/") != pg.Environment["POSTGRES_DB"] {
		t.Errorf("postgres.url points at %s:%s/%s, not compose's postgres service and database %s", u.Hostname(), u.Port(), u.Path, pg.Environment["POSTGRES_DB"])
	}
	initSQL, err := os.ReadFile("init.sql")
	if err != nil {
		t.Fatal(err)
	}
	user, _ := u.User.Password()
	if !strings.Contains(string(initSQL), "CREATE ROLE "+u.User.Username()+" LOGIN REPLICATION PASSWORD '"+user+"'") {
		t.Errorf("init.sql does not create the role %q with the password of postgres.url", u.User.Username())
	}
	if !strings.Contains(string(initSQL), "CREATE PUBLICATION "+cfg.CDC.Publication+" FOR TABLE "+cfg.Outbox.Table) {
		t.Errorf("init.sql does not create publication %q for %s", cfg.CDC.Publication, cfg.Outbox.Table)
	}
	advertised := kafka.Environment["KAFKA_ADVERTISED_LISTENERS"]
	for _, b := range cfg.Kafka.Brokers {
		if !strings.Contains(advertised, "://"+b) {
			t.Errorf("kafka.brokers has %s, which kafka does not advertise (%s)", b, advertised)
		}
	}
	_, port, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil || !slices.Contains(relay.Ports, port+":"+port) {
		t.Errorf("http.listen %s is not the port compose publishes (%v)", cfg.HTTP.Listen, relay.Ports)
	}
}

// finalStage returns the instructions of a Dockerfile's last stage, one
// per logical line, comments dropped.
func finalStage(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			continue
		}
		cur.WriteString(l)
		line := cur.String()
		cur.Reset()
		if strings.HasPrefix(line, "FROM ") {
			lines = nil
		}
		lines = append(lines, line)
	}
	return lines
}

func instruction(lines []string, name string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}

// TestImagesAgree checks that the Dockerfile's image and the one assembled
// locally run the same way: static base, the same user, entrypoint,
// command and port.
func TestImagesAgree(t *testing.T) {
	df, local := finalStage(t, "Dockerfile"), finalStage(t, "Containerfile.local")
	if from := instruction(df, "FROM"); from != "FROM gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("Dockerfile's final stage is %q, want distroless static nonroot", from)
	}
	if from := instruction(local, "FROM"); from != "FROM scratch" {
		t.Errorf("Containerfile.local starts %q, want FROM scratch (nothing to pull)", from)
	}
	for _, name := range []string{"USER", "ENTRYPOINT", "CMD", "EXPOSE"} {
		a, b := instruction(df, name), instruction(local, name)
		if a == "" || a != b {
			t.Errorf("%s: Dockerfile has %q, Containerfile.local %q", name, a, b)
		}
	}
	if u := instruction(df, "USER"); u != "USER 65532:65532" {
		t.Errorf("image user: %q, want the non-root 65532", u)
	}
	if c := instruction(df, "CMD"); !strings.Contains(c, `"/etc/outboxrelay/config.yaml"`) {
		t.Errorf("CMD %q does not read the config where compose and the docs mount it", c)
	}
}

// TestBuildLocalImage runs docker/build-local.sh, which builds the image
// from a static binary without pulling anything and runs `outboxrelay
// version` in it. It needs podman.
func TestBuildLocalImage(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed, so the image cannot be built here; apt-get install podman (and runc on hosts with hybrid cgroups) to run this test")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH to build the binary")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	version := "test-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./build-local.sh")
	cmd.Env = append(os.Environ(),
		"VERSION="+version,
		"IMAGE=localhost/outboxrelay-test:"+version,
		// A throwaway store: the test leaves nothing in the machine's own.
		"PODMAN_STORE="+t.TempDir(),
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("build-local.sh:\n%s", stderr.String())
	if err != nil {
		t.Fatalf("build-local.sh: %v", err)
	}
	// The version the binary in the image prints (on its first line; the
	// revision and Go version follow) is the one just built.
	if got, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n"); got != "outboxrelay "+version {
		t.Errorf("the image's outboxrelay version printed %q, want a first line %q", out, "outboxrelay "+version)
	}
}
