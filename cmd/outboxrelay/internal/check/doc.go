// Package check is `outboxrelay check`: it connects with a configuration
// and reports, line by line, whether PostgreSQL and Kafka are set up for
// the relay (wal_level, the role's privileges, the table and its columns,
// the publication, the slot's state, the brokers, TLS, SASL and topics),
// with the fix for each problem. It changes nothing: no object is
// created, no topic, no slot.
//
// Every line is PASS, WARN (works, but look at it), FAIL (the relay cannot
// work like this) or SKIP (not configured, or not checkable after an
// earlier failure). No secret appears in the report: connection strings
// are redacted at the source and every text is scrubbed of the
// configured passwords.
package check
