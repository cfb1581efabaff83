package check

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/pgsql"
)

// Check names, as the report shows them.
const (
	CheckPGConnection  = "postgres connection"
	CheckPGTLS         = "postgres TLS"
	CheckWalLevel      = "wal_level"
	CheckRole          = "role privileges"
	CheckTable         = "outbox table"
	CheckTableGrants   = "table privileges"
	CheckColumns       = "outbox columns"
	CheckPublication   = "publication"
	CheckSlot          = "replication slot"
	CheckDeadLetter    = "dead-letter table"
	CheckTrigger       = "notify trigger"
	CheckKafka         = "kafka connection"
	CheckKafkaTLS      = "kafka TLS"
	CheckKafkaSASL     = "kafka SASL"
	CheckKafkaTopics   = "kafka topics"
	maxAggregateSample = 1000
)

// pgFacts are what the Kafka checks learn from PostgreSQL.
type pgFacts struct {
	// aggregateTypes seen in the outbox table (a sample), and whether the
	// table could be read at all.
	aggregateTypes []string
	sampled        bool
}

// pgCheck holds what the PostgreSQL checks share.
type pgCheck struct {
	r             *Report
	cfg           *config.Config
	o             options
	conn          *pgx.Conn
	schema, table string
	tbl           string // quoted, for the fixes
	user          string // current_user
	role          string // quoted current_user
	// partitioned: the outbox table is partitioned, so a publication
	// must publish its partitions via the root.
	partitioned bool
}

func checkPostgres(ctx context.Context, r *Report, cfg *config.Config, o options) pgFacts {
	schema, table, _ := cdc.SplitTable(cfg.Outbox.Table) // validated with the config
	c := &pgCheck{r: r, cfg: cfg, o: o, schema: schema, table: table, tbl: pgx.Identifier{schema, table}.Sanitize()}
	later := []string{CheckPGTLS, CheckTable, CheckTableGrants, CheckColumns, CheckDeadLetter, CheckTrigger}
	if cfg.Source == "cdc" {
		later = []string{CheckPGTLS, CheckWalLevel, CheckRole, CheckTable, CheckTableGrants, CheckColumns, CheckPublication, CheckSlot}
	}

	// The network bounds as the relay has them (keepalive,
	// TCP_USER_TIMEOUT), and the check's own timeout.
	pcfg, err := pgsql.Config(cfg.Postgres.URL, cfg.Postgres.Network(),
		pgsql.ConnectTimeout(o.timeout), pgsql.Param("application_name", "outboxrelay-check"))
	if err != nil {
		r.add(Fail, CheckPGConnection, "postgres.url cannot be parsed", "fix postgres.url: postgres://user@host:5432/database?sslmode=verify-full")
		skipAll(r, later)
		return pgFacts{}
	}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c.conn, err = pgx.ConnectConfig(cctx, pcfg)
	if err != nil {
		r.add(Fail, CheckPGConnection, err.Error(), connectFix(err, pcfg, o))
		skipAll(r, later)
		return pgFacts{}
	}
	defer pgsql.Close(ctx, c.conn)

	var version string
	if err := c.conn.QueryRow(cctx, `SELECT current_setting('server_version'), current_user`).Scan(&version, &c.user); err != nil {
		r.add(Fail, CheckPGConnection, "connected, but a first query failed: "+err.Error(), "see the PostgreSQL server log")
		skipAll(r, later)
		return pgFacts{}
	}
	c.role = pgx.Identifier{c.user}.Sanitize()
	r.pass(CheckPGConnection, "connected to PostgreSQL %s as %q, database %q on %s", version, c.user, pcfg.Database, hostPort(pcfg))
	c.checkTLS(cctx, pcfg)
	if cfg.Source == "cdc" {
		c.checkWalLevel(cctx)
		c.checkReplicationRole(cctx)
	}
	exists := c.checkTable(cctx)
	var facts pgFacts
	if exists {
		c.checkColumns(cctx)
		facts = c.sampleAggregateTypes(cctx)
	} else {
		skipAll(r, []string{CheckTableGrants, CheckColumns})
	}
	switch cfg.Source {
	case "cdc":
		c.checkPublication(cctx, exists)
		c.checkSlot(cctx, pcfg)
	case "poll":
		c.checkDeadLetter(cctx)
		if exists {
			c.checkTrigger(cctx)
		} else {
			skipAll(r, []string{CheckTrigger})
		}
	}
	return facts
}

func skipAll(r *Report, checks []string) {
	for _, ch := range checks {
		r.skip(ch, "not checked: needs what failed above")
	}
}

func hostPort(c *pgx.ConnConfig) string {
	if strings.HasPrefix(c.Host, "/") {
		return "socket " + c.Host
	}
	return net.JoinHostPort(c.Host, fmt.Sprint(c.Port))
}

// connectFix says what to do about a failed connection.
func connectFix(err error, c *pgx.ConnConfig, o options) string {
	var pe *pgconn.PgError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var netErr net.Error
	switch {
	case errors.As(err, &pe) && pe.Code == "28P01":
		return fmt.Sprintf("the password of role %q was refused: check it in postgres.url, postgres.password_file or PGPASSWORD", c.User)
	case errors.As(err, &pe) && pe.Code == "28000":
		return fmt.Sprintf("the server does not let role %q in from here: add a pg_hba.conf line for it (host ... scram-sha-256), or ALTER ROLE ... LOGIN", c.User)
	case errors.As(err, &pe) && pe.Code == "3D000":
		return fmt.Sprintf("database %q does not exist: create it, or fix the database in postgres.url", c.Database)
	case errors.As(err, &pe) && pe.Code == "53300":
		return "the server has no connection slots left: raise max_connections or close idle connections"
	case errors.As(err, &pe):
		return fmt.Sprintf("the server refused the connection (SQLSTATE %s): see its log", pe.Code)
	case errors.As(err, &unknownCA):
		return "the server's certificate is not signed by a CA you trust: set sslrootcert=<CA file> in postgres.url"
	case errors.As(err, &hostname):
		return fmt.Sprintf("the server's certificate is not valid for %q: connect by a name it carries (sslmode=verify-full checks it)", hostname.Host)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens at %s: check the host and port in postgres.url, and that PostgreSQL is running and listens there (listen_addresses)", hostPort(c))
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer from %s within %s: check the host, the port and the firewalls between", hostPort(c), o.timeout)
	}
	return "check postgres.url (host, port, user, database, sslmode) and the server's log"
}

func (c *pgCheck) checkTLS(ctx context.Context, pcfg *pgx.ConnConfig) {
	var ssl bool
	var version, cipher *string
	err := c.conn.QueryRow(ctx, `SELECT ssl, version, cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl, &version, &cipher)
	if err != nil {
		c.r.add(Warn, CheckPGTLS, "cannot read pg_stat_ssl: "+err.Error(), "")
		return
	}
	mode := pgsql.SSLMode(c.cfg.Postgres.URL)
	switch {
	case ssl && mode == "verify-full":
		c.r.pass(CheckPGTLS, "encrypted (%s, %s); the server's certificate and name are verified (sslmode=verify-full)", deref(version), deref(cipher))
	case ssl:
		c.r.add(Warn, CheckPGTLS, fmt.Sprintf("encrypted (%s), but the server's identity is not verified (sslmode=%s)", deref(version), mode),
			"set sslmode=verify-full and sslrootcert=<the CA's certificate file> in postgres.url")
	case pgsql.IsLocal(pcfg.Host):
		c.r.pass(CheckPGTLS, "not encrypted (sslmode=%s); the server is on this host", mode)
	default:
		c.r.add(Warn, CheckPGTLS, fmt.Sprintf("not encrypted (sslmode=%s): the password and every event cross the network in the clear", mode),
			"turn on ssl in postgresql.conf and set sslmode=verify-full and sslrootcert=<the CA's certificate file> in postgres.url")
	}
}

func deref(s *string) string {
	if s == nil {
		return "?"
	}
	return *s
}

func (c *pgCheck) checkWalLevel(ctx context.Context) {
	var level string
	if err := c.conn.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&level); err != nil {
		c.r.add(Fail, CheckWalLevel, "cannot read wal_level: "+err.Error(), "")
		return
	}
	if level != "logical" {
		c.r.add(Fail, CheckWalLevel, fmt.Sprintf("wal_level is %q; logical replication needs %q", level, "logical"),
			"as a superuser: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (on a managed service, set the parameter in its console: rds.logical_replication = 1 on Amazon RDS, cloudsql.logical_decoding = on on Cloud SQL); or use source: poll")
		return
	}
	c.r.pass(CheckWalLevel, "logical")
}

func (c *pgCheck) checkReplicationRole(ctx context.Context) {
	var super, repl, rds bool
	err := c.conn.QueryRow(ctx, `
		SELECT r.rolsuper, r.rolreplication,
		       EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication' AND pg_has_role(r.oid, g.oid, 'MEMBER'))
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&super, &repl, &rds)
	if err != nil {
		c.r.add(Fail, CheckRole, "cannot read the role's attributes: "+err.Error(), "")
		return
	}
	switch {
	case super:
		c.r.add(Warn, CheckRole, fmt.Sprintf("role %q is a superuser: it works, but the relay needs only REPLICATION and SELECT on the outbox table", c.user),
			"give the relay a least-privilege role: outboxrelay init --role <name> prints the SQL")
	case repl || rds:
		c.r.pass(CheckRole, "role %q may stream changes (REPLICATION) and is not a superuser", c.user)
	default:
		c.r.add(Fail, CheckRole, fmt.Sprintf("role %q lacks the REPLICATION attribute that reading a replication slot needs", c.user),
			fmt.Sprintf("as a superuser: ALTER ROLE %s REPLICATION; (Amazon RDS: GRANT rds_replication TO %s;)", c.role, c.role))
	}
}

// checkTable reports whether the outbox table exists and the role's grants
// on it; it returns whether the table exists.
func (c *pgCheck) checkTable(ctx context.Context) bool {
	var kind, owner string
	var sel, upd, del, usage, children bool
	err := c.conn.QueryRow(ctx, `
		SELECT c.relkind::text, pg_get_userbyid(c.relowner),
		       has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),
		       has_schema_privilege(n.oid, 'USAGE'), EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, c.schema, c.table).Scan(&kind, &owner, &sel, &upd, &del, &usage, &children)
	if errors.Is(err, pgx.ErrNoRows) {
		c.r.add(Fail, CheckTable, fmt.Sprintf("table %s does not exist in database %q", c.tbl, c.conn.Config().Database),
			"create it (outboxrelay init prints the SQL), or set outbox.table to yours")
		return false
	}
	if err != nil {
		c.r.add(Fail, CheckTable, "cannot look up the table: "+err.Error(), "")
		return false
	}
	if kind != "r" && kind != "p" {
		c.r.add(Fail, CheckTable, fmt.Sprintf("%s is not a table (relkind %s)", c.tbl, kind), "point outbox.table at a table")
		return false
	}
	c.partitioned = kind == "p"
	switch {
	case c.cfg.Source == "poll" && (c.partitioned || children):
		c.r.add(Fail, CheckTable, fmt.Sprintf("%s is partitioned or has inheritance children, and the poller cannot tell their rows apart (it marks rows by ctid, which each one numbers on its own)", c.tbl),
			"use source: cdc, or a table without partitions")
	case children && !c.partitioned:
		c.r.add(Fail, CheckTable, fmt.Sprintf("%s has inheritance children, and logical replication sends their rows under their own names, which the relay would not know as the outbox's", c.tbl),
			"make it a partitioned table, or keep the events in the table itself")
	default:
		c.r.pass(CheckTable, "%s exists, owned by %q", c.tbl, owner)
	}

	need := map[string]bool{"SELECT": sel}
	why := "SELECT on the outbox table"
	if c.cfg.Source == "poll" {
		need["UPDATE"], need["DELETE"] = upd, del
		why = "SELECT, UPDATE and DELETE, to claim, mark and delete rows"
	}
	var missing []string
	for _, p := range []string{"SELECT", "UPDATE", "DELETE"} {
		if has, wanted := need[p]; wanted && !has {
			missing = append(missing, p)
		}
	}
	var lacks, fixes []string
	if !usage {
		qs := pgx.Identifier{c.schema}.Sanitize()
		lacks = append(lacks, "USAGE on schema "+qs)
		fixes = append(fixes, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", qs, c.role))
	}
	if len(missing) > 0 {
		lacks = append(lacks, strings.Join(missing, ", ")+" on "+c.tbl)
		fixes = append(fixes, fmt.Sprintf("GRANT %s ON TABLE %s TO %s;", strings.Join(missing, ", "), c.tbl, c.role))
	}
	switch {
	case len(lacks) > 0 && c.cfg.Source == "cdc":
		// Logical decoding does not check table privileges (the walsender
		// streams what the publication names), so the relay runs; SELECT
		// is in the least-privilege set for this check and for tools that
		// read the table.
		c.r.add(Warn, CheckTableGrants, fmt.Sprintf("role %q lacks %s; streaming works without it, but this check cannot read the table to see which topics its events need", c.user, strings.Join(lacks, " and ")),
			"as the table's owner: "+strings.Join(fixes, " "))
		return true
	case len(lacks) > 0:
		c.r.add(Fail, CheckTableGrants, fmt.Sprintf("role %q lacks %s; it needs %s", c.user, strings.Join(lacks, " and "), why),
			"as the table's owner: "+strings.Join(fixes, " "))
		return true
	}
	c.r.pass(CheckTableGrants, "role %q has %s", c.user, why)
	return true
}

// Column types the relay reads well, by role.
var (
	textTypes    = []string{"text", "character varying", "character", "uuid", "bigint", "integer", "smallint", "numeric"}
	payloadTypes = []string{"jsonb", "json", "text", "character varying", "bytea"}
)

func (c *pgCheck) checkColumns(ctx context.Context) {
	rows, err := c.conn.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, NULL), a.attnotnull
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, c.schema, c.table)
	if err != nil {
		c.r.add(Fail, CheckColumns, "cannot read the columns: "+err.Error(), "")
		return
	}
	type col struct {
		typ     string
		notNull bool
	}
	cols := map[string]col{}
	var name, typ string
	var notNull bool
	_, err = pgx.ForEachRow(rows, []any{&name, &typ, &notNull}, func() error {
		cols[name] = col{typ, notNull}
		return nil
	})
	if err != nil {
		c.r.add(Fail, CheckColumns, "cannot read the columns: "+err.Error(), "")
		return
	}
	m := c.cfg.Outbox.Columns.WithDefaults()
	var fails, warns, fixes []string
	for _, want := range []struct {
		key, name string
		required  bool
		types     []string
	}{
		{"id", m.ID, true, textTypes},
		{"aggregatetype", m.AggregateType, true, textTypes},
		{"aggregateid", m.AggregateID, true, textTypes},
		{"type", m.Type, false, textTypes},
		{"payload", m.Payload, false, payloadTypes},
	} {
		got, ok := cols[want.name]
		switch {
		case !ok && want.required:
			fails = append(fails, fmt.Sprintf("no column %q (outbox.columns.%s)", want.name, want.key))
		case !ok:
			warns = append(warns, fmt.Sprintf("no column %q (outbox.columns.%s): events will have none", want.name, want.key))
		case !slices.Contains(want.types, got.typ):
			warns = append(warns, fmt.Sprintf("column %q is %s, an unusual type for the %s; its text form is used", want.name, got.typ, want.key))
		case want.key == "aggregateid" && !got.notNull:
			warns = append(warns, fmt.Sprintf("column %q may be NULL; an event without an aggregate id cannot be published", want.name))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL;", c.tbl, pgx.Identifier{want.name}.Sanitize()))
		}
	}
	if c.cfg.Source == "poll" {
		pc := c.cfg.PollConfig()
		pc.SetDefaults()
		var own []string
		own = append(own, pc.OrderColumn, pc.AttemptsColumn)
		if pc.Mode == "mark" {
			own = append(own, pc.PublishedColumn)
		}
		for _, name := range own {
			if _, ok := cols[name]; !ok {
				fails = append(fails, fmt.Sprintf("no poller column %q", name))
				fixes = append(fixes, "run the SQL that outboxrelay init prints (or outboxrelay poll-ddl) as the table's owner")
			}
		}
	}
	have := slices.Sorted(func(yield func(string) bool) {
		for n := range cols {
			if !yield(n) {
				return
			}
		}
	})
	switch {
	case len(fails) > 0:
		c.r.add(Fail, CheckColumns, strings.Join(append(fails, warns...), "; ")+fmt.Sprintf(" (the table has %s)", strings.Join(have, ", ")),
			strings.Join(append([]string{"add the columns, or map yours under outbox.columns"}, fixes...), "; "))
	case len(warns) > 0:
		c.r.add(Warn, CheckColumns, strings.Join(warns, "; "), strings.Join(append(fixes, "see outbox.columns"), "; "))
	default:
		c.r.pass(CheckColumns, "%s, %s, %s, %s, %s present with usable types", m.ID, m.AggregateType, m.AggregateID, m.Type, m.Payload)
	}
}

// sampleAggregateTypes reads the aggregate types of some rows, for the
// topics check. A sample, so a large table costs little.
func (c *pgCheck) sampleAggregateTypes(ctx context.Context) pgFacts {
	col := pgx.Identifier{c.cfg.Outbox.Columns.WithDefaults().AggregateType}.Sanitize()
	rows, err := c.conn.Query(ctx, fmt.Sprintf(`SELECT DISTINCT t::text FROM (SELECT %s AS t FROM %s LIMIT %d) s WHERE t IS NOT NULL ORDER BY 1`,
		col, c.tbl, maxAggregateSample))
	if err != nil {
		return pgFacts{}
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return pgFacts{}
	}
	return pgFacts{aggregateTypes: types, sampled: true}
}

func (c *pgCheck) checkPublication(ctx context.Context, tableExists bool) {
	pub := c.cfg.CDCConfig()
	pub.SetDefaults()
	name := pub.Publication
	qpub := pgx.Identifier{name}.Sanitize()
	with := "publish = 'insert'"
	if c.partitioned {
		with += ", publish_via_partition_root = true"
	}
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (%s);", qpub, c.tbl, with)
	var insert, update, del, all, covers, owner bool
	err := c.conn.QueryRow(ctx, `
		SELECT p.pubinsert, p.pubupdate, p.pubdelete, p.puballtables,
		       EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3),
		       pg_has_role(p.pubowner, 'USAGE')
		FROM pg_publication p WHERE p.pubname = $1`, name, c.schema, c.table).Scan(&insert, &update, &del, &all, &covers, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		canCreate := false
		if tableExists {
			_ = c.conn.QueryRow(ctx, `
				SELECT pg_has_role(c.relowner, 'USAGE') AND has_database_privilege(current_database(), 'CREATE')
				FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
				c.schema, c.table).Scan(&canCreate)
		}
		if *pub.CreatePublication && canCreate {
			c.r.add(Warn, CheckPublication, fmt.Sprintf("publication %q does not exist; the relay will create it when it starts (role %q owns the table)", name, c.user),
				"nothing, or create it now: "+create)
			return
		}
		why := "cdc.create_publication is false"
		if *pub.CreatePublication {
			why = fmt.Sprintf("role %q cannot create it (that needs ownership of the table and CREATE on the database)", c.user)
		}
		c.r.add(Fail, CheckPublication, fmt.Sprintf("publication %q does not exist, and %s", name, why),
			"as the table's owner: "+create+" (outboxrelay init prints it)")
		return
	}
	if err != nil {
		c.r.add(Fail, CheckPublication, "cannot look up the publication: "+err.Error(), "")
		return
	}
	var problems, fixes []string
	viaRoot := true
	if c.partitioned {
		// Partitioned tables are published from PostgreSQL 13 on, with
		// pubviaroot.
		if err := c.conn.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, name).Scan(&viaRoot); err != nil {
			c.r.add(Fail, CheckPublication, "cannot look up the publication: "+err.Error(), "")
			return
		}
	}
	if !viaRoot {
		// pg_publication_tables lists the partitions then, not the table.
		problems = append(problems, fmt.Sprintf("sends the rows of partitioned table %s under each partition's name, which the relay would not know as the outbox's", c.tbl))
		fixes = append(fixes, fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true);", qpub))
	} else if !covers {
		problems = append(problems, fmt.Sprintf("does not include %s", c.tbl))
		fixes = append(fixes, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s;", qpub, c.tbl))
	}
	if !insert {
		problems = append(problems, "does not publish inserts")
		fixes = append(fixes, fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert');", qpub))
	}
	if len(problems) > 0 {
		c.r.add(Fail, CheckPublication, fmt.Sprintf("publication %q %s", name, strings.Join(problems, " and ")),
			"as the publication's owner: "+strings.Join(fixes, " "))
		return
	}
	detail := fmt.Sprintf("publication %q covers %s and publishes inserts", name, c.tbl)
	if all {
		detail = fmt.Sprintf("publication %q is FOR ALL TABLES and publishes inserts; every table's changes are decoded and the relay skips all but %s", name, c.tbl)
	}
	if update || del {
		detail += "; it also publishes updates or deletes, which the relay skips (publish = 'insert' saves the work)"
	}
	c.r.pass(CheckPublication, "%s", detail)
}

func (c *pgCheck) checkSlot(ctx context.Context, pcfg *pgx.ConnConfig) {
	cc := c.cfg.CDCConfig()
	cc.SetDefaults()
	slot := cc.Slot
	var plugin, database, walStatus string
	var lag, safe *int64
	var pid *int32
	var temporary bool
	err := c.conn.QueryRow(ctx, `
		SELECT coalesce(plugin, ''), coalesce(database, ''), temporary, coalesce(wal_status, ''), active_pid,
		       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &database, &temporary, &walStatus, &pid, &lag, &safe)
	if errors.Is(err, pgx.ErrNoRows) {
		var free int
		if err := c.conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`).Scan(&free); err == nil && free <= 0 {
			c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q does not exist, and every one of max_replication_slots is in use", slot),
				"drop a slot nobody reads (SELECT pg_drop_replication_slot('...')), or raise max_replication_slots and restart PostgreSQL")
			return
		}
		c.r.add(Warn, CheckSlot, fmt.Sprintf("slot %q does not exist yet; the relay creates it when it first starts, and it captures only what commits after that", slot),
			fmt.Sprintf("create it now, before the application writes events, so none is missed: SELECT pg_create_logical_replication_slot('%s', 'pgoutput'); (outboxrelay init does)", slot))
		return
	}
	if err != nil {
		c.r.add(Fail, CheckSlot, "cannot look up the slot: "+err.Error(), "")
		return
	}
	switch {
	case plugin != "pgoutput":
		c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q uses plugin %q; the relay needs pgoutput", slot, plugin), "set cdc.slot to another name, or drop this slot if nothing else reads it")
		return
	case database != pcfg.Database:
		c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q belongs to database %q, not %q", slot, database, pcfg.Database), "set cdc.slot to another name")
		return
	case walStatus == "lost":
		c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q has lost WAL it needed (wal_status lost): events committed while it fell behind are gone from it", slot),
			"drop and recreate the slot, then republish what the outbox table still holds; raise max_slot_wal_keep_size so it does not happen again")
		return
	}
	detail := fmt.Sprintf("slot %q (pgoutput), wal_status %s, %s behind the server", slot, walStatus, bytesText(lag))
	if safe != nil {
		detail += fmt.Sprintf(", %s left before max_slot_wal_keep_size", bytesText(safe))
	} else {
		detail += "; max_slot_wal_keep_size is -1, so the slot may hold back WAL without bound while the relay is down (set it, and alert on OutboxRelaySlotWALRetained)"
	}
	detail += "; " + c.failoverText(ctx, slot)
	switch {
	case walStatus == "unreserved":
		c.r.add(Warn, CheckSlot, detail+"; the WAL it needs is about to be removed",
			"start the relay (or find why it is behind) now; raise max_slot_wal_keep_size")
	case pid != nil:
		c.r.add(Warn, CheckSlot, fmt.Sprintf("%s; in use by PID %d, so another relay cannot start on it", detail, *pid),
			fmt.Sprintf("nothing if that is your running relay; otherwise see SELECT * FROM pg_stat_replication WHERE pid = %d", *pid))
	case lag != nil && *lag > 1<<30:
		c.r.add(Warn, CheckSlot, detail+"; the slot holds back that much WAL on the server's disk", "start the relay, or drop the slot if it is no longer used")
	default:
		c.r.pass(CheckSlot, "%s; not in use", detail)
	}
}

// failoverText says whether the slot survives a failover: only a failover
// slot does (PostgreSQL 17 and later, synchronized to a standby with
// sync_replication_slots); before 17 no slot does, and the relay's
// checkpoint is what makes the loss loud.
func (c *pgCheck) failoverText(ctx context.Context, slot string) string {
	var version int
	if err := c.conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return "whether it is a failover slot is unknown: " + err.Error()
	}
	if version < 170000 {
		return fmt.Sprintf("not a failover slot (PostgreSQL %d has none): a promoted standby does not have it, and the relay then stops on the lost slot (docs/guarantees.md#a-lost-replication-slot)", version/10000)
	}
	var failover bool
	if err := c.conn.QueryRow(ctx, failoverQuery, slot).Scan(&failover); err != nil {
		return "whether it is a failover slot is unknown: " + err.Error()
	}
	if !failover {
		return "not a failover slot: a promoted standby does not have it; ALTER_REPLICATION_SLOT on a replication connection, or drop it and let the relay create it (cdc.failover_slot)"
	}
	return "a failover slot: a standby with sync_replication_slots keeps it"
}

// failoverQuery reads pg_replication_slots.failover, which PostgreSQL 17
// added.
const failoverQuery = `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`

func bytesText(n *int64) string {
	if n == nil {
		return "? bytes"
	}
	v := float64(*n)
	for _, unit := range []string{"bytes", "KiB", "MiB", "GiB"} {
		if v < 1024 || unit == "GiB" {
			if unit == "bytes" {
				return fmt.Sprintf("%d bytes", *n)
			}
			return fmt.Sprintf("%.1f %s", v, unit)
		}
		v /= 1024
	}
	return ""
}

// pollDDLFix is where the poller's schema comes from.
const pollDDLFix = "as the table's owner, run the SQL that outboxrelay init (or outboxrelay poll-ddl) prints"

func (c *pgCheck) checkDeadLetter(ctx context.Context) {
	pc := c.cfg.PollConfig()
	pc.SetDefaults()
	schema, table := c.schema, pc.DeadLetterTable
	if s, t, ok := strings.Cut(pc.DeadLetterTable, "."); ok {
		schema, table = s, t
	}
	qdl := pgx.Identifier{schema, table}.Sanitize()
	var insert bool
	err := c.conn.QueryRow(ctx, `
		SELECT has_table_privilege(c.oid, 'INSERT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, table).Scan(&insert)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.r.add(Fail, CheckDeadLetter, fmt.Sprintf("table %s does not exist; rows that fail poll.max_attempts times move there", qdl), pollDDLFix)
	case err != nil:
		c.r.add(Fail, CheckDeadLetter, "cannot look up the table: "+err.Error(), "")
	case !insert:
		c.r.add(Fail, CheckDeadLetter, fmt.Sprintf("role %q lacks INSERT on %s, where rows that can never be published go", c.user, qdl),
			fmt.Sprintf("as the table's owner: GRANT INSERT ON TABLE %s TO %s;", qdl, c.role))
	default:
		c.r.pass(CheckDeadLetter, "%s exists and role %q may insert into it", qdl, c.user)
	}
}

func (c *pgCheck) checkTrigger(ctx context.Context) {
	var found bool
	err := c.conn.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		               WHERE n.nspname = $1 AND c.relname = $2 AND t.tgname = 'outboxrelay_notify' AND t.tgenabled <> 'D')`,
		c.schema, c.table).Scan(&found)
	switch {
	case err != nil:
		c.r.add(Warn, CheckTrigger, "cannot look up the trigger: "+err.Error(), "")
	case !found:
		c.r.add(Warn, CheckTrigger, fmt.Sprintf("%s has no outboxrelay_notify trigger: the poller finds new rows at the next poll.interval instead of at once", c.tbl),
			pollDDLFix+" (it is optional)")
	default:
		c.r.pass(CheckTrigger, "outboxrelay_notify wakes the poller when events commit")
	}
}
