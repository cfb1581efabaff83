// Command kfake runs franz-go's kfake broker in a process of its own, on a
// fixed port, for the tests to use as a broker they did not start
// (OUTBOXRELAY_TEST_KAFKA_BROKERS, docs/brokers.md). It prints its
// addresses, comma-separated, on one line of stdout and serves until
// SIGINT or SIGTERM.
//
//	go run ./internal/testenv/cmd/kfake -port 9092 &
//	OUTBOXRELAY_TEST_KAFKA_BROKERS=127.0.0.1:9092 go test ./integration/ -run TestSources
//
// Flags shape it as a user's broker would be: -c auto.create.topics.enable=false
// with -auto-create=false, -c min.insync.replicas=2 (with -brokers 3),
// -as-version 3.9 for a Kafka before transactions v2, -sasl and -tls-cert
// for an authenticated, encrypted listener, -acls with -user for a
// principal the cluster grants nothing.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kfake:", err)
		}
		os.Exit(1)
	}
}

// configs is a repeatable key=value flag.
type configs map[string]string

func (c configs) String() string { return fmt.Sprint(map[string]string(c)) }

func (c configs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	c[k] = v
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parse(args, stderr)
	if err != nil {
		return err
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer c.Close()
	if _, err := fmt.Fprintln(stdout, strings.Join(c.ListenAddrs(), ",")); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// parse turns the flags into kfake's options.
func parse(args []string, stderr io.Writer) ([]kfake.Opt, error) {
	fs := flag.NewFlagSet("kfake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 9092, "port of the first broker, the next ones on the ports after it; 0 for any free ports")
	brokers := fs.Int("brokers", 1, "brokers in the cluster")
	partitions := fs.Int("partitions", 8, "partitions of a topic created without a count (num.partitions)")
	autoCreate := fs.Bool("auto-create", true, "create a topic when a client first asks for it")
	asVersion := fs.String("as-version", "", "advertise only the requests of this Kafka release, as 3.9")
	saslUser := fs.String("sasl", "", "require SASL, with this superuser: MECHANISM:user:password, MECHANISM being PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	acls := fs.Bool("acls", false, "check ACLs: only the -sasl superuser may do anything until it grants more")
	user := fs.String("user", "", "with -sasl, one more user, MECHANISM:user:password, without any ACL")
	tlsCert := fs.String("tls-cert", "", "serve TLS with this PEM certificate (needs -tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM key of -tls-cert")
	cfgs := configs{}
	fs.Var(cfgs, "c", "broker config key=value, repeatable: message.max.bytes, min.insync.replicas, auto.create.topics.enable...")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	opts := []kfake.Opt{kfake.NumBrokers(*brokers), kfake.DefaultNumPartitions(*partitions)}
	if *port != 0 {
		ports := make([]int, *brokers)
		for i := range ports {
			ports[i] = *port + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if len(cfgs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(cfgs))
	}
	if *asVersion != "" {
		v := kversion.FromString(*asVersion)
		if v == nil {
			return nil, fmt.Errorf("-as-version: %q is not a Kafka release kversion knows (%s)", *asVersion, strings.Join(kversion.VersionStrings(), " "))
		}
		opts = append(opts, kfake.MaxVersions(v))
	}
	if *saslUser != "" {
		m, u, p, err := credentials("-sasl", *saslUser)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(m, u, p))
	}
	if *user != "" {
		m, u, p, err := credentials("-user", *user)
		if err != nil {
			return nil, err
		}
		if *saslUser == "" {
			return nil, errors.New("-user needs -sasl")
		}
		opts = append(opts, kfake.User(m, u, p))
	}
	if *acls {
		opts = append(opts, kfake.EnableACLs())
	}
	if *tlsCert != "" || *tlsKey != "" {
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert and -tls-key: %w", err)
		}
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	}
	return opts, nil
}

// credentials splits MECHANISM:user:password, the flag's value.
func credentials(flag, v string) (mechanism, user, password string, err error) {
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("%s: %q is not MECHANISM:user:password", flag, v)
	}
	return strings.ToUpper(parts[0]), parts[1], parts[2], nil
}
