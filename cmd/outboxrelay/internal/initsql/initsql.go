package initsql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Options say what to set up. Names are taken as written (case and all)
// and are always quoted in the SQL.
type Options struct {
	// Source is "cdc" or "poll".
	Source string
	// Schema and Table name the outbox table; Columns its columns
	// (Debezium's names by default).
	Schema, Table string
	Columns       connector.ColumnMap
	// HeadersColumn is routing.headers_column: when set, the table has
	// that column (jsonb), which is added to a table made without it.
	// Empty, the table has Debezium's five columns alone.
	HeadersColumn string
	// Database is the database the relay connects to, for GRANT CONNECT.
	Database string
	// Role is the relay's role, created when missing.
	Role string
	// RoleVerifier, when set, becomes the role's password: a
	// SCRAM-SHA-256 verifier from [ScramVerifier], so the SQL never holds
	// the password itself. Empty leaves the password alone.
	RoleVerifier string
	// Publication and Slot are the cdc source's; Slot empty skips creating
	// the slot.
	Publication, Slot string
	// Cleanup: the cdc source deletes rows Kafka has (cdc.cleanup), and
	// needs DELETE on the table.
	Cleanup bool
	// PollerDDL is the poller's own DDL (poller.DDL): its columns, index,
	// dead-letter table and notify trigger. DeadLetterSchema and
	// DeadLetterTable name the table the poller inserts failed rows into.
	PollerDDL                         string
	DeadLetterSchema, DeadLetterTable string
}

// Statement is one step of the script.
type Statement struct {
	// Comment says why, in a line or a few.
	Comment string
	SQL     string
}

// Script is what a DBA runs: Tx in one transaction, then After (which
// cannot run in a transaction that has written: creating a slot).
type Script struct {
	Header []string
	Tx     []Statement
	After  []Statement
}

// Build returns the script for o. It checks that every name is one
// PostgreSQL can hold; quotes, semicolons and spaces are fine, since every
// name is quoted.
func Build(o Options) (Script, error) {
	o.Columns = o.Columns.WithDefaults()
	if err := o.validate(); err != nil {
		return Script{}, err
	}
	tbl := ident(o.Schema, o.Table)
	role := ident(o.Role)
	var s Script
	add := func(comment, format string, args ...any) {
		s.Tx = append(s.Tx, Statement{Comment: comment, SQL: fmt.Sprintf(format, args...)})
	}

	who := "Run it as a superuser (only one may give a role REPLICATION); every"
	if o.Source == "poll" {
		who = "Run it as a superuser, or as the outbox table's owner with CREATEROLE; every"
	}
	s.Header = []string{
		fmt.Sprintf("What outboxrelay (source: %s) needs on database %s, for role %s.", o.Source, ident(o.Database), role),
		who,
		"statement can be run again. With psql: psql -v ON_ERROR_STOP=1 -d <database> -f init.sql",
	}

	if o.Schema != "public" {
		add("The outbox table's schema.", "CREATE SCHEMA IF NOT EXISTS %s;", ident(o.Schema))
	}
	o.addTable(add, tbl)

	switch o.Source {
	case "cdc":
		add("The publication: inserts into the outbox table and nothing else. Creating\nit needs ownership of the table, which is why it is here and not left to\nthe relay's role. A partitioned table's rows are published under its own\nname (publish_via_partition_root), which is the name the relay knows.",
			"%s", doBlock(fmt.Sprintf(`IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = %[1]s) THEN
    IF (SELECT relkind FROM pg_class WHERE oid = %[5]s::regclass) = 'p' THEN
      %[6]s;
    ELSE
      %[7]s;
    END IF;
  ELSIF NOT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = %[1]s AND schemaname = %[3]s AND tablename = %[4]s) THEN
    %[2]s;
  END IF;`, literal(o.Publication), pgsql.AddTableSQL(o.Publication, tbl), literal(o.Schema), literal(o.Table), literal(tbl),
				// The statements the relay and outboxrelay check advise too.
				pgsql.CreatePublicationSQL(o.Publication, true, tbl), pgsql.CreatePublicationSQL(o.Publication, false, tbl))))
		add("The relay's role: it logs in and streams changes (REPLICATION); it is not\na superuser and owns nothing. On a managed service that keeps REPLICATION\nfor itself, grant its role instead (Amazon RDS: GRANT rds_replication TO ...;\nCloud SQL: ALTER ROLE ... WITH REPLICATION as cloudsqlsuperuser).",
			"%s", doBlock(fmt.Sprintf(`IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN
    CREATE ROLE %s LOGIN REPLICATION;
  ELSE
    ALTER ROLE %s LOGIN REPLICATION;
  END IF;`, literal(o.Role), role, role)))
	case "poll":
		add("The relay's role: it logs in and reads and updates the outbox; it needs no\nREPLICATION, is not a superuser and owns nothing.",
			"%s", doBlock(fmt.Sprintf(`IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN
    CREATE ROLE %s LOGIN;
  ELSE
    ALTER ROLE %s LOGIN;
  END IF;`, literal(o.Role), role, role)))
	}
	if o.RoleVerifier != "" {
		add("The role's password, as a SCRAM-SHA-256 verifier: the password itself is\nnot in this script or in the server's logs.",
			"ALTER ROLE %s PASSWORD %s;", role, literal(o.RoleVerifier))
	} else {
		s.Header = append(s.Header, fmt.Sprintf("No password is set here; give the role one with psql's \\password %s", role))
	}
	add("", "GRANT CONNECT ON DATABASE %s TO %s;", ident(o.Database), role)
	add("", "GRANT USAGE ON SCHEMA %s TO %s;", ident(o.Schema), role)
	switch o.Source {
	case "cdc":
		if o.Cleanup {
			add("The relay reads the table (the initial lookup of its columns, and logical\nreplication, which checks SELECT) and deletes the rows whose events Kafka\nhas, once older than cdc.cleanup.retention (DELETE).",
				"GRANT SELECT, DELETE ON TABLE %s TO %s;", tbl, role)
			break
		}
		add("Reading the table is all the relay does with it: the initial lookup of its\ncolumns, and logical replication, which checks SELECT.",
			"GRANT SELECT ON TABLE %s TO %s;", tbl, role)
	case "poll":
		add("The poller claims rows (SELECT ... FOR UPDATE), marks them published\n(UPDATE) and deletes them after retention or when they move to the\ndead-letter table (DELETE).",
			"GRANT SELECT, UPDATE, DELETE ON TABLE %s TO %s;", tbl, role)
		s.Tx = append(s.Tx, Statement{Comment: "The poller's columns, index, dead-letter table and notify trigger.", SQL: strings.TrimSpace(o.PollerDDL)})
		if o.DeadLetterSchema != o.Schema {
			add("", "GRANT USAGE ON SCHEMA %s TO %s;", ident(o.DeadLetterSchema), role)
		}
		add("Rows that can never be published move here, with the reason.",
			"GRANT INSERT ON TABLE %s TO %s;", ident(o.DeadLetterSchema, o.DeadLetterTable), role)
	}

	if o.Source == "cdc" && o.Slot != "" {
		s.After = append(s.After, Statement{
			Comment: "The replication slot, after the transaction (a slot cannot be created in a\ntransaction that has written). It captures only what commits after it\nexists: creating it now, before the application writes events, means none\nis missed before the relay first starts. Until the relay reads it, it holds\nWAL: start the relay soon, or drop it (SELECT pg_drop_replication_slot(...)).",
			SQL: fmt.Sprintf("SELECT slot_name FROM pg_create_logical_replication_slot(%s, 'pgoutput')\nWHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s);",
				literal(o.Slot), literal(o.Slot)),
		})
	}
	return s, nil
}

// Merge joins the scripts of several outbox tables into one: the first's
// header, then each statement once, in order. The tables' scripts share
// the role, its grants and the slot; each adds its table, and the
// publication block adds each table to the publication the first made.
func Merge(scripts ...Script) Script {
	if len(scripts) == 0 {
		return Script{}
	}
	out := Script{Header: scripts[0].Header}
	seen := map[string]bool{}
	for _, s := range scripts {
		for _, st := range s.Tx {
			if !seen[st.SQL] {
				seen[st.SQL] = true
				out.Tx = append(out.Tx, st)
			}
		}
		for _, st := range s.After {
			if !seen[st.SQL] {
				seen[st.SQL] = true
				out.After = append(out.After, st)
			}
		}
	}
	return out
}

// addTable adds the outbox table's statements: the table, and with a
// headers column the statement that adds it to a table made without it.
func (o *Options) addTable(add func(comment, format string, args ...any), tbl string) {
	m := o.Columns
	names := []string{m.ID, m.AggregateType, m.AggregateID, m.Type, m.Payload}
	if o.HeadersColumn == "" {
		add("The outbox table, as Debezium's outbox event router expects it; skipped\nwhen it exists. The application inserts a row in the transaction that\nchanges the aggregate. It has no column for record headers (the Go\nwriter's Event.Headers and trace context): to send them, set\nrouting.headers_column: headers and run init again, which adds it.",
			`CREATE TABLE IF NOT EXISTS %s (
  %s uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  %s varchar(255) NOT NULL,
  %s varchar(255) NOT NULL,
  %s varchar(255) NOT NULL,
  %s jsonb
);`, tbl, pad(m.ID, names), pad(m.AggregateType, names), pad(m.AggregateID, names), pad(m.Type, names), pad(m.Payload, names))
		return
	}
	names = append(names, o.HeadersColumn)
	add("The outbox table, as Debezium's outbox event router expects it, and the\ncolumn routing.headers_column names; skipped when it exists. The\napplication inserts a row in the transaction that changes the aggregate.",
		`CREATE TABLE IF NOT EXISTS %s (
  %s uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  %s varchar(255) NOT NULL,
  %s varchar(255) NOT NULL,
  %s varchar(255) NOT NULL,
  %s jsonb,
  %s jsonb
);`, tbl, pad(m.ID, names), pad(m.AggregateType, names), pad(m.AggregateID, names), pad(m.Type, names), pad(m.Payload, names), pad(o.HeadersColumn, names))
	add("routing.headers_column: a JSON object whose entries become the record's\nheaders (the Go writer's Event.Headers and trace context, with\noutbox.HeadersColumn), added to a table made without it.",
		"ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s jsonb;", tbl, ident(o.HeadersColumn))
}

func (o *Options) validate() error {
	var errs []error
	// Names the script prints in its comments too (the database, the
	// role) must not be able to end a comment's line, as none that the
	// configuration's keys give can.
	check := func(what, name string) {
		if name == "" {
			errs = append(errs, fmt.Errorf("%s is empty", what))
		} else if err := pgident.Check(name); err != nil {
			errs = append(errs, fmt.Errorf("%s %q %w", what, name, err))
		}
	}
	check("the outbox table's schema", o.Schema)
	check("the outbox table", o.Table)
	check("the database", o.Database)
	check("the role", o.Role)
	cols := []string{o.Columns.ID, o.Columns.AggregateType, o.Columns.AggregateID, o.Columns.Type, o.Columns.Payload}
	for _, c := range cols {
		check("an outbox column", c)
	}
	if o.HeadersColumn != "" {
		check("routing.headers_column", o.HeadersColumn)
		if slices.Contains(cols, o.HeadersColumn) {
			errs = append(errs, fmt.Errorf("routing.headers_column %q is one of outbox.columns; name a column of its own, usually headers", o.HeadersColumn))
		}
	}
	switch o.Source {
	case "cdc":
		check("the publication", o.Publication)
	case "poll":
		check("the dead-letter table's schema", o.DeadLetterSchema)
		check("the dead-letter table", o.DeadLetterTable)
		if strings.TrimSpace(o.PollerDDL) == "" {
			errs = append(errs, errors.New("the poller's DDL is missing"))
		}
	default:
		errs = append(errs, fmt.Errorf("source %q is not cdc or poll", o.Source))
	}
	return errors.Join(errs...)
}

// step is one piece of the script as printed and as run: its comment
// lines and its SQL, or BEGIN or COMMIT.
type step struct {
	text  string
	label string
	// tx says the step runs inside the transaction: BEGIN and the Tx
	// statements, after which a failure rolls back what went before.
	tx bool
}

// steps are the script's pieces in order: BEGIN, Tx, COMMIT, then After.
// String prints them and Apply runs them, the same text, so that what
// --apply runs is what init printed, comments and all: a name that could
// end a comment would do the same in both (pgident's quoting makes sure
// none can).
func (s Script) steps() []step {
	out := []step{{text: "BEGIN;\n", label: "begin", tx: true}}
	for _, st := range s.Tx {
		out = append(out, step{text: comment(st.Comment) + st.SQL + "\n", label: st.label(), tx: true})
	}
	out = append(out, step{text: "COMMIT;\n", label: "commit"})
	for _, st := range s.After {
		out = append(out, step{text: comment(st.Comment) + st.SQL + "\n", label: st.label()})
	}
	return out
}

// comment writes c as -- lines. Every line break, a carriage return too,
// starts a new -- line, so that no text of c can end up outside a
// comment.
func comment(c string) string {
	if c == "" {
		return ""
	}
	var b strings.Builder
	c = strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(c)
	for line := range strings.SplitSeq(c, "\n") {
		b.WriteString("-- " + line + "\n")
	}
	return b.String()
}

// String is the script as a DBA runs it with psql: the header, then
// each step as Apply runs it.
func (s Script) String() string {
	var b strings.Builder
	b.WriteString(comment(strings.Join(s.Header, "\n")))
	for _, st := range s.steps() {
		b.WriteString("\n" + st.text)
	}
	return b.String()
}

// Apply runs the script on conn: Tx in one transaction, then After, each
// step the very text String prints for it. An error names the step that
// failed; nothing of Tx stays after one.
func Apply(ctx context.Context, conn *pgx.Conn, s Script) error {
	pc := conn.PgConn()
	// The simple protocol: a step holds comments, and the poller's DDL is
	// several statements.
	return apply(s, func(sql string) error { return pc.Exec(ctx, sql).Close() })
}

// apply runs each of s's steps with run.
func apply(s Script, run func(sql string) error) (err error) {
	inTx := false
	defer func() {
		if err != nil && inTx {
			_ = run("ROLLBACK")
		}
	}()
	for _, st := range s.steps() {
		if err := run(st.text); err != nil {
			return fmt.Errorf("%s: %w", st.label, err)
		}
		inTx = st.tx
	}
	return nil
}

// label names a statement in an error: its first line, or for a DO block
// the first line of its comment.
func (st Statement) label() string {
	line, _, _ := strings.Cut(st.SQL, "\n")
	if strings.HasPrefix(line, "DO ") && st.Comment != "" {
		line, _, _ = strings.Cut(st.Comment, "\n")
		return strings.TrimSuffix(line, ".")
	}
	// A password verifier is not a password, but it stays out of errors.
	if i := strings.Index(line, " PASSWORD "); i >= 0 {
		line = line[:i] + " PASSWORD ..."
	}
	return line
}

// pad quotes a column name and pads it to the longest of the table's
// names, so the types line up.
func pad(name string, names []string) string {
	width := 0
	for _, n := range names {
		width = max(width, len(ident(n)))
	}
	q := ident(name)
	return q + strings.Repeat(" ", width-len(q))
}

// ident quotes a name, or schema.name, for SQL and for the script's
// comments: pgident's quoting cannot end a comment's line.
func ident(parts ...string) string { return pgident.Quote(parts...) }

// literal quotes s as an SQL string whose meaning does not depend on
// standard_conforming_strings.
func literal(s string) string { return pgident.Literal(s) }

// doBlock wraps PL/pgSQL in a DO statement, with a dollar quote that the
// body (names included) cannot close.
func doBlock(body string) string {
	tag := "$outboxrelay$"
	for i := 1; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$outboxrelay%d$", i)
	}
	return "DO " + tag + "\nBEGIN\n  " + body + "\nEND\n" + tag + ";"
}
