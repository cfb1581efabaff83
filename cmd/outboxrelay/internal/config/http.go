package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// HTTP is the endpoint serving /metrics, /healthz and /readyz.
type HTTP struct {
	Listen            string        `yaml:"listen" doc:"Address of the HTTP endpoint serving /metrics, /healthz and /readyz, host:port (:8080 is every interface)."`
	ReadyStallTimeout time.Duration `yaml:"ready_stall_timeout" doc:"/readyz fails once an event has waited this long for Kafka's acknowledgement, or a batch this long to be published."`
	LiveStallTimeout  time.Duration `yaml:"live_stall_timeout" doc:"/healthz fails once the relay has been stuck like that this long, or its source has not been connected (nor waiting for the slot as a standby) this long, so that Kubernetes restarts it."`
}

func (h *HTTP) setDefaults() {
	if h.Listen == "" {
		h.Listen = ":8080"
	}
	if h.ReadyStallTimeout == 0 {
		h.ReadyStallTimeout = 30 * time.Second
	}
	if h.LiveStallTimeout == 0 {
		h.LiveStallTimeout = 5 * time.Minute
	}
}

// validate reports every problem with the http section; it expects
// defaults to have been set.
func (h *HTTP) validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(h.Listen); err != nil {
		errs = append(errs, fmt.Errorf("http.listen: %q is not host:port (write :8080 for every interface, 127.0.0.1:8080 for this host only)", h.Listen))
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		errs = append(errs, fmt.Errorf("http.listen: %q has no valid port (0 to 65535)", h.Listen))
	}
	if h.ReadyStallTimeout < 0 {
		errs = append(errs, fmt.Errorf("http.ready_stall_timeout: %s is negative", h.ReadyStallTimeout))
	}
	if h.LiveStallTimeout < h.ReadyStallTimeout {
		errs = append(errs, fmt.Errorf("http.live_stall_timeout (%s) is shorter than http.ready_stall_timeout (%s); a relay should stop being ready before it is restarted", h.LiveStallTimeout, h.ReadyStallTimeout))
	}
	return errors.Join(errs...)
}
