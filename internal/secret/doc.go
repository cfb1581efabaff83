// Package secret keeps the relay's secrets out of what it prints, and reads
// the files that hold them.
//
// [Redact] is the one rule for every connection string and URL the relay
// shows an operator (logs, config-dump, check, debezium translate, errors):
// a PostgreSQL URL or keyword/value string, a Schema Registry URL, and a
// URL that net/url refuses to parse alike. [RedactError] applies it to the
// errors that quote a connection string or URL (net/url's, pgconn's parse
// errors), which must never be printed as they come. [ReadFile] reads a
// secret file (a password_file) with a bound, refusing what is not a
// regular file, and [Exposed] says when others can read one.
//
// It sits beneath cdc, poller, sink, debezium and the app, which all use
// it, and imports none of them.
package secret
