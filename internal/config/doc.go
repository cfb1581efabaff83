// Package config reads outboxrelay's configuration: a YAML file, then
// environment variables named after the keys (OUTBOXRELAY_<SECTION>_<KEY>),
// then defaults; every problem is reported at once. The reference table in
// the README is generated from the `doc` and `default` tags here, and a test
// keeps the two the same.
package config
