package testenv

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
)

// Main runs the tests of m, closes what the package's tests left open (the
// shared PostgreSQL server and Kafka container, kfake clusters) and exits
// with the tests' code, or 1 if closing failed or a passing run leaked
// goroutines. opts are passed to goleak to ignore known long-lived
// goroutines. Call it from TestMain.
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(runner{m}, opts...)
}

// runner closes the shared resources after the tests and before goleak
// looks for leaked goroutines, which those resources would otherwise be.
type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	if err := closeAll(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// open holds the kfake clusters not yet closed; t.Cleanup normally closes
// them, Main closes any left.
var open = struct {
	sync.Mutex
	clusters map[*kfake.Cluster]struct{}
}{clusters: map[*kfake.Cluster]struct{}{}}

func trackCluster(c *kfake.Cluster) {
	open.Lock()
	defer open.Unlock()
	open.clusters[c] = struct{}{}
}

// closeCluster closes c once, whoever gets there first.
func closeCluster(c *kfake.Cluster) {
	open.Lock()
	_, ok := open.clusters[c]
	delete(open.clusters, c)
	open.Unlock()
	if ok {
		c.Close()
	}
}

func closeAll() error {
	open.Lock()
	clusters := make([]*kfake.Cluster, 0, len(open.clusters))
	for c := range open.clusters {
		clusters = append(clusters, c)
	}
	open.Unlock()
	for _, c := range clusters {
		closeCluster(c)
	}
	return errors.Join(closeSharedPostgres(), closeSharedKafka())
}
