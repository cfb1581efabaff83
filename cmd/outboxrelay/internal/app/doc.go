// Package app assembles outboxrelay from its configuration: the source the
// configuration names, the Kafka sink and the runner between them.
package app
