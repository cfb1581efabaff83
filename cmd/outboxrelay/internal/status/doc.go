// Package status is what `outboxrelay status` reads and prints: a running
// relay's own status (the JSON of its /status, written for a terminal) or,
// when none answers, what PostgreSQL and the checkpoint topic say of it,
// read without changing anything.
package status
