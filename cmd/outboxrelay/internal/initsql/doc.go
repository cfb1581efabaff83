// Package initsql writes the SQL that `outboxrelay init` prints and, with
// --apply, runs: the outbox table, the publication (cdc) or the poller's
// columns, index, dead-letter table and notify trigger (poll), a
// least-privilege role for the relay, and the replication slot (cdc).
//
// Every name is quoted (and every string literal escaped) wherever it goes
// into SQL, so a table or publication named with quotes and semicolons is
// just a name, and a name can end no line of a comment (pgident); every
// statement is idempotent, so the script can be run again. --apply runs
// the very text that is printed, step by step, comments and all. The role's password is set as a SCRAM-SHA-256 verifier, so the
// password itself is in neither the script nor the server's logs.
package initsql
