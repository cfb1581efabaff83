// Package pgident checks and writes the PostgreSQL names (identifiers) a
// user configures: the outbox table and its schema, columns, publication,
// slot, dead-letter table and the rest. It sits beneath the sources, cdc
// and poller, which each validate their own names with it.
//
// It promises three things. [Check] accepts only a name PostgreSQL keeps
// exactly as written and that cannot end or rearrange a line of printed
// SQL. [Quote] writes any name so that it stays one token, also inside a
// -- comment, and never names another object. [WithSuffix] makes a
// generated name (an index's) that PostgreSQL keeps whole, cut between
// characters.
package pgident
