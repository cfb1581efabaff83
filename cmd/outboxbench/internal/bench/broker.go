package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// broker is the Kafka-protocol broker a phase measures against: kfake in
// this process, or in one of its own (Config.BrokerProcess).
type broker interface {
	ListenAddrs() []string
	// CPU is the broker process's CPU time so far; 0 in this process,
	// whose own CPU time holds the broker's.
	CPU() time.Duration
	Close()
}

type inProcess struct{ *kfake.Cluster }

func (inProcess) CPU() time.Duration { return 0 }

// startBroker starts the phase's broker, with the topics made; blackhole
// as for newCluster.
func (r *run) startBroker(partitions int, blackhole bool) (broker, error) {
	if !r.cfg.BrokerProcess {
		c, err := newCluster(partitions, blackhole, r.cfg.ProduceDelay)
		if err != nil {
			return nil, err
		}
		return inProcess{c}, nil
	}
	args := []string{"broker", "-partitions", fmt.Sprint(partitions)}
	if blackhole {
		args = append(args, "-blackhole")
	}
	if r.cfg.ProduceDelay > 0 {
		args = append(args, "-produce-delay", r.cfg.ProduceDelay.String())
	}
	cmd := exec.Command(r.self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the broker process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the broker process did not say where it listens: %w", err)
	}
	return &brokerProc{cmd: cmd, stdin: stdin, addrs: strings.Split(strings.TrimSpace(line), ",")}, nil
}

// brokerProc is kfake in a child process: `outboxbench broker`.
type brokerProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	addrs []string
}

func (b *brokerProc) ListenAddrs() []string { return b.addrs }

func (b *brokerProc) CPU() time.Duration {
	u, err := procUsage(b.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return u.CPU
}

// Close ends the process: closing its standard input tells it to stop.
func (b *brokerProc) Close() {
	b.stdin.Close()
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

// BrokerMain is `outboxbench broker`: a kfake broker as the benchmark
// makes it, in this process, which prints its addresses (comma-separated)
// on a line of stdout and stops when stdin closes or ctx ends.
func BrokerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	partitions := fs.Int("partitions", 8, "partitions per topic")
	blackhole := fs.Bool("blackhole", false, "acknowledge produced records without keeping them")
	delay := fs.Duration("produce-delay", 0, "hold every produce request this long before answering it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newCluster(*partitions, *blackhole, *delay)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := fmt.Fprintln(stdout, strings.Join(c.ListenAddrs(), ",")); err != nil {
		return err
	}
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin) // until EOF or an error: either way the benchmark is gone
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
	}
	return nil
}
