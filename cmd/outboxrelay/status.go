package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/httpserver"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/status"
)

var statusUsage = commandUsage{
	text: `Usage: outboxrelay status --config FILE [--url URL] [--json] [--timeout D]
       outboxrelay status --debezium-config FILE [--config FILE] [--url URL] [--json] [--timeout D]

Prints where the relay stands: from the running relay's /status on
http.listen (a listen address without a host is 127.0.0.1) when it
answers; otherwise from PostgreSQL and the checkpoint topic (the slot, its
lag, whether a session holds it, the checkpoint's age; for poll, the rows
waiting), changing nothing. Exits 0 when the relay is ready, 1 when it is
not ready or does not answer.
`,
	docs: "docs/status.md",
}

// statusCmd is `outboxrelay status`.
func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay status", statusUsage)
	cf := addConfigFlags(fs)
	url := fs.String("url", "", "the relay's status endpoint (default: http://HOST:PORT/status of http.listen)")
	asJSON := fs.Bool("json", false, "print the status as JSON: the relay's /status, or the report read from PostgreSQL and Kafka")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on asking the relay, and on reading PostgreSQL and Kafka")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, _, err := cf.load(os.Environ())
	if err != nil {
		return configProblems(err)
	}
	if *url == "" {
		*url = statusURL(cfg.HTTP.Listen)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	s, raw, askErr := askRelay(ctx, *url)
	if askErr == nil {
		if *asJSON {
			_, err = stdout.Write(raw)
		} else {
			err = status.WriteRelay(stdout, *url, s)
		}
		if err != nil {
			return err
		}
		if !s.Ready {
			return fmt.Errorf("the relay at %s runs but is not ready: %s", *url, failing(s.Readiness))
		}
		return nil
	}
	r := status.Offline(ctx, cfg)
	if *asJSON {
		err = json.NewEncoder(stdout).Encode(r)
	} else {
		fmt.Fprintf(stdout, "no relay answers at %s (%v); what PostgreSQL and Kafka say:\n\n", *url, askErr)
		err = r.Write(stdout)
	}
	if err != nil {
		return err
	}
	if r.Slot != nil && r.Slot.Holder != nil {
		return fmt.Errorf("no relay answers at %s, but PID %d holds the slot %q: a relay may run elsewhere (--url names its endpoint)", *url, r.Slot.Holder.PID, r.Slot.Name)
	}
	return fmt.Errorf("the relay is not running: nothing answers at %s", *url)
}

// statusURL is the /status of the relay listening on listen; a listen
// address without a host, or on every interface, is asked on loopback.
func statusURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen + "/status"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/status"
}

// askRelay fetches the relay's status; an error when nothing answers there
// or what answers is not a relay's status.
func askRelay(ctx context.Context, url string) (httpserver.Status, []byte, error) {
	var s httpserver.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, nil, err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return s, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return s, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return s, nil, fmt.Errorf("%s answers %s", url, resp.Status)
	}
	if err := json.Unmarshal(raw, &s); err != nil || s.Source == "" {
		return s, nil, errors.Join(fmt.Errorf("%s does not answer with a relay's status", url), err)
	}
	return s, raw, nil
}

// failing lists the readiness checks that fail, with what they say.
func failing(checks []httpserver.CheckResult) string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Name+": "+c.Message)
		}
	}
	return strings.Join(out, "; ")
}
