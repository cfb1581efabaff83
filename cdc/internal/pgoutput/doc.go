// Package pgoutput turns pgoutput's relation and tuple messages into outbox
// columns: it caches relations by OID, as the protocol requires, and decodes
// tuple values from PostgreSQL's text form, which pgoutput sends for every
// type, into the bytes an event carries.
package pgoutput
