// Package httpserver serves the relay's operational endpoint: /metrics in
// the Prometheus text format, /healthz for a liveness probe and /readyz for
// a readiness probe. Each probe runs a list of named checks and answers
// 200 when all pass, 503 otherwise, with one line per check saying what is
// wrong, so that `curl host:8080/readyz` tells an operator why. With a
// [Config.Status], / is a status page for a person (one HTML page, no
// script and no external assets, refreshing itself) and /status the same
// in JSON: for a setup without Prometheus and Grafana. Nothing it serves
// changes the relay's state.
package httpserver
