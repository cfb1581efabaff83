package testenv

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

// testcontainers-go is pinned at v0.44.0: v0.45.0 requires a version of
// github.com/Azure/go-ansiterm that the Go module proxy does not serve, which
// makes `go mod tidy` fail for the whole module.

// dockerImage is the server Postgres runs in a container: the major
// OUTBOXRELAY_TEST_PG asks for, else 15, which is also what scripts/test
// installs on Debian 12.
func dockerImage() string {
	if major := os.Getenv(localpg.MajorEnv); major != "" {
		return "postgres:" + major
	}
	return "postgres:15"
}

// dockerProbeTimeout bounds the check for a Docker daemon, which every test
// binary using Postgres pays once.
const dockerProbeTimeout = 3 * time.Second

// dockerAvailable reports whether a Docker daemon answers: `docker info`
// succeeds, or the daemon socket (DOCKER_HOST, else the default unix
// socket) answers a ping.
func dockerAvailable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	if docker, err := exec.LookPath("docker"); err == nil {
		if exec.CommandContext(ctx, docker, "info").Run() == nil {
			return true
		}
	}
	return pingDockerSocket(ctx)
}

// pingDockerSocket sends GET /_ping to the daemon named by DOCKER_HOST (only
// unix:// and plain tcp://), or to /var/run/docker.sock.
func pingDockerSocket(ctx context.Context) bool {
	network, addr := "unix", "/var/run/docker.sock"
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		u, err := url.Parse(host)
		if err != nil || (u.Scheme != "unix" && u.Scheme != "tcp") || os.Getenv("DOCKER_TLS_VERIFY") != "" {
			return false
		}
		network, addr = u.Scheme, u.Host
		if u.Scheme == "unix" {
			addr = u.Path
		}
	}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return false
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startDockerPostgres runs dockerImage() with the settings localpg uses.
func startDockerPostgres(ctx context.Context) (*pgBackend, error) {
	settings := localpg.DefaultSettings()
	cmd := []string{"postgres"}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		cmd = append(cmd, "-c", k+"="+settings[k])
	}
	image := dockerImage()
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		testcontainers.WithEnv(map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithCmd(cmd...),
		testcontainers.WithWaitStrategy(
			// The image's entrypoint starts the server once to run its
			// init scripts, stops it, then starts it for good.
			wait.ForLog("database system is ready to accept connections").
				WithOccurrence(2).WithStartupTimeout(startTimeout),
			wait.ForListeningPort("5432/tcp"),
		),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, fmt.Errorf("run container %s: %w", image, err)
	}
	endpoint, err := ctr.PortEndpoint(ctx, "5432/tcp", "")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, fmt.Errorf("find port of container %s: %w", image, err)
	}
	return &pgBackend{
		adminURL: "postgres://postgres@" + endpoint + "/postgres?sslmode=disable",
		origin:   "Docker container " + image + " at " + endpoint,
		close:    func() error { return testcontainers.TerminateContainer(ctr) },
	}, nil
}
