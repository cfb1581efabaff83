// Package config reads outboxrelay's configuration: a YAML file, then
// environment variables named after the keys (OUTBOXRELAY_<SECTION>_<KEY>),
// then defaults; every problem is reported at once. The reference table in
// docs/configuration.md is generated from the `doc` and `default` tags here
// (go generate ./cmd/outboxrelay/internal/config), and a test keeps the two the same.
package config

//go:generate go run ./gendoc ../../../../docs/configuration.md
