// Package deploy holds no code: it is where the artefacts for running the
// relay live (kubernetes/: a Kustomize base; helm/outboxrelay: a Helm
// chart; prometheus/: alert rules and their unit tests; grafana/: a
// dashboard), and its tests check them against the relay: every manifest
// decodes strictly into the Kubernetes API types and agrees with the
// configuration the relay loads from it, the chart renders what the base
// does, the rules pass promtool, and every alert links to its runbook in
// docs/runbooks.md. That the metrics the rules and the dashboard query
// exist is checked in integration/deploy_test.go, against a running relay.
package deploy
