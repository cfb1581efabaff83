package testenv

import (
	"context"
	"fmt"
	"os"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// EnvKafkaImage replaces the image EnvKafka starts, for another release:
// apache/kafka:3.9.1, say, for a broker without transactions v2.
const EnvKafkaImage = "OUTBOXRELAY_TEST_KAFKA_IMAGE"

// A broker in Docker tells its clients to connect to the address it
// advertises, which must be the host's end of the port Docker maps, known
// only once the container has started. So the container starts a shell
// that waits for advertiseFile, which the PostStarts hook writes with that
// address, and only then starts the broker.
const advertiseFile = "/tmp/outboxrelay-advertise"

// dockerKafka is how to run one flavour of broker in a container.
type dockerKafka struct {
	image string
	// start is the shell command that starts the broker advertising the
	// address in advertiseFile.
	start string
	// ready is the line the broker logs once it serves clients.
	ready string
}

var dockerKafkas = map[string]dockerKafka{
	// Apache Kafka 4 (KRaft, transactions v2 on by default). The image's
	// defaults are a single combined node whose PLAINTEXT_HOST listener
	// takes clients on 9092; only its advertised address changes.
	flavourKafka: {
		image: "apache/kafka:4.1.0",
		start: `exec /etc/kafka/docker/run "KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://localhost:29092,PLAINTEXT_HOST://$(cat ` + advertiseFile + `)"`,
		ready: "Kafka Server started",
	},
	// Redpanda, which implements no transactions v2, in its mode for a
	// container on a developer's machine (topics created on first use).
	flavourRedpanda: {
		image: "docker.redpanda.com/redpandadata/redpanda:v24.3.6",
		start: `exec /entrypoint.sh redpanda start --mode=dev-container --smp=1 --memory=1G --kafka-addr=0.0.0.0:9092 "--advertise-kafka-addr=$(cat ` + advertiseFile + `)"`,
		ready: "Successfully started Redpanda!",
	},
}

// startDockerKafka runs flavour's broker in a container and returns its
// address, a description for the test log and how to stop it.
func startDockerKafka(ctx context.Context, flavour string) (addrs []string, origin string, stop func() error, err error) {
	d := dockerKafkas[flavour]
	if img := os.Getenv(EnvKafkaImage); img != "" {
		d.image = img
	}
	ctr, err := testcontainers.Run(ctx, d.image,
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		testcontainers.WithExposedPorts("9092/tcp"),
		testcontainers.WithEntrypoint("sh", "-c"),
		testcontainers.WithCmd("while [ ! -s "+advertiseFile+" ]; do sleep 0.1; done; "+d.start),
		testcontainers.WithLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostStarts: []testcontainers.ContainerHook{func(ctx context.Context, c testcontainers.Container) error {
				if err := wait.ForMappedPort("9092/tcp").WaitUntilReady(ctx, c); err != nil {
					return err
				}
				endpoint, err := c.PortEndpoint(ctx, "9092/tcp", "")
				if err != nil {
					return err
				}
				if err := c.CopyToContainer(ctx, []byte(endpoint), advertiseFile, 0o644); err != nil {
					return err
				}
				return wait.ForLog(d.ready).WithStartupTimeout(startTimeout).WaitUntilReady(ctx, c)
			}},
		}),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, "", nil, fmt.Errorf("run container %s: %w", d.image, err)
	}
	endpoint, err := ctr.PortEndpoint(ctx, "9092/tcp", "")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, "", nil, fmt.Errorf("find port of container %s: %w", d.image, err)
	}
	return []string{endpoint}, fmt.Sprintf("Docker container %s at %s", d.image, endpoint),
		func() error { return testcontainers.TerminateContainer(ctr) }, nil
}
