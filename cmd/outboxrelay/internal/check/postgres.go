package check

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Check names, as the report shows them.
const (
	CheckPGConnection = "postgres connection"
	CheckPGTLS        = "postgres TLS"
	CheckPooler       = "connection pooler"
	CheckWalLevel     = "wal_level"
	CheckRole         = "role privileges"
	CheckTable        = "outbox table"
	CheckTableGrants  = "table privileges"
	CheckColumns      = "outbox columns"
	CheckPublication  = "publication"
	CheckSlot         = "replication slot"
	// CheckSlotWALLimit, CheckSlotIdleTimeout and CheckSlotFailover are
	// what may take the slot away: the WAL it may keep, an idle timeout,
	// a failover.
	CheckSlotWALLimit    = "slot WAL limit"
	CheckSlotIdleTimeout = "slot idle timeout"
	CheckSlotFailover    = "failover slot"
	CheckDeadLetter      = "dead-letter table"
	CheckTrigger         = "notify trigger"
	CheckKafka           = "kafka connection"
	CheckKafkaTLS        = "kafka TLS"
	CheckKafkaSASL       = "kafka SASL"
	CheckKafkaTopics     = "kafka topics"
	maxAggregateSample   = 1000
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
	cdc           cdc.Config // cfg's cdc section, with its defaults
	o             options
	conn          *pgx.Conn
	schema, table string
	tbl           string // quoted, for the fixes
	user          string // current_user
	role          string // quoted current_user
	// facts are the catalog's, read once (pgsql.ReadFacts), which the
	// checks judge with the verdicts the relay itself uses.
	facts pgsql.Facts
}

// report adds v as the result of check.
func (c *pgCheck) report(check string, v pgsql.Verdict) {
	switch v.Level {
	case pgsql.OK:
		c.r.pass(check, "%s", v.Detail)
	case pgsql.Warn:
		c.r.add(Warn, check, v.Detail, v.Fix)
	default:
		c.r.add(Fail, check, v.Detail, v.Fix)
	}
}

func checkPostgres(ctx context.Context, r *Report, cfg *config.Config, o options) pgFacts {
	schema, table, _ := cdc.SplitTable(cfg.Outbox.Table) // validated with the config
	c := &pgCheck{r: r, cfg: cfg, cdc: cfg.CDCConfig(), o: o, schema: schema, table: table, tbl: pgx.Identifier{schema, table}.Sanitize()}
	c.cdc.SetDefaults()
	later := []string{CheckPooler, CheckPGTLS, CheckTable, CheckTableGrants, CheckColumns, CheckDeadLetter, CheckTrigger}
	if cfg.Source == "cdc" {
		later = []string{CheckPooler, CheckPGTLS, CheckWalLevel, CheckRole, CheckTable, CheckTableGrants, CheckColumns, CheckPublication, CheckSlot, CheckSlotWALLimit, CheckSlotIdleTimeout, CheckSlotFailover}
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
	reportPooler := c.checkPooler(cctx, pcfg) // pooler.go; first, on a connection nothing else ran on

	publication := ""
	if cfg.Source == "cdc" {
		publication = c.cdc.Publication
	}
	c.facts, err = pgsql.ReadFacts(cctx, c.conn, publication, pgsql.TableName{Schema: schema, Name: table})
	if err != nil {
		r.add(Fail, CheckPGConnection, "connected, but a first query failed: "+err.Error(), "see the PostgreSQL server log")
		reportPooler() // a pooler may be why
		skipAll(r, later[1:])
		return pgFacts{}
	}
	c.user = c.facts.User
	c.role = pgx.Identifier{c.user}.Sanitize()
	connected := fmt.Sprintf("connected to PostgreSQL %s as %q, database %q on %s", c.facts.Version, c.user, pcfg.Database, hostPort(pcfg))
	switch v := c.facts.StandbySource(); {
	case !c.facts.InRecovery:
		r.pass(CheckPGConnection, "%s", connected)
	case cfg.Source == "poll":
		r.add(Fail, CheckPGConnection, connected+", a standby (pg_is_in_recovery() is true): the poller marks the rows it publishes, and a standby takes no writes",
			"point postgres.url at the primary; to follow a failover, list every server with target_session_attrs=read-write (postgres://host1,host2/db?target_session_attrs=read-write) or use an address the failover moves")
	case v.Level == pgsql.Fail:
		r.add(Fail, CheckPGConnection, connected+"; "+v.Detail, v.Fix)
	default:
		r.pass(CheckPGConnection, "%s; %s", connected, v.Detail)
	}
	reportPooler()
	c.checkTLS(cctx, pcfg)
	if cfg.Source == "cdc" {
		c.report(CheckWalLevel, c.facts.LogicalWAL())
		c.report(CheckRole, c.facts.ReplicationRole())
	}
	exists := c.checkTable()
	var facts pgFacts
	if exists {
		c.checkColumns(cctx)
		facts = c.sampleAggregateTypes(cctx)
	} else {
		skipAll(r, []string{CheckTableGrants, CheckColumns})
	}
	switch cfg.Source {
	case "cdc":
		c.checkPublication(exists)
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

// connectFix says what to do about a failed connection, as the relay
// itself says it.
func connectFix(err error, c *pgx.ConnConfig, o options) string {
	return pgsql.ConnectFix(err, &c.Config, o.timeout)
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

// checkTable reports whether the outbox table exists and the role's grants
// on it; it returns whether the table exists.
func (c *pgCheck) checkTable() bool {
	t := c.facts.Tables[0]
	c.report(CheckTable, c.facts.TableKind(string(c.cfg.Source), t))
	if !t.Exists || (t.Kind != "r" && t.Kind != "p") {
		return false
	}
	sel, upd, del, usage := t.Select, t.Update, t.Delete, t.SchemaUsage

	need := map[string]bool{"SELECT": sel}
	why := "SELECT on the outbox table"
	cleanup := c.cfg.Source == "cdc" && c.cfg.CDC.Cleanup.Enabled
	switch {
	case c.cfg.Source == "poll":
		need["UPDATE"], need["DELETE"] = upd, del
		why = "SELECT, UPDATE and DELETE, to claim, mark and delete rows"
	case cleanup:
		need["DELETE"] = del
		why = "SELECT, and DELETE for cdc.cleanup"
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
	case len(lacks) > 0 && cleanup && !del:
		c.r.add(Fail, CheckTableGrants, fmt.Sprintf("role %q lacks %s; it needs %s", c.user, strings.Join(lacks, " and "), why),
			"as the table's owner: "+strings.Join(fixes, " ")+" (outboxrelay init grants it), or turn cdc.cleanup off")
		return true
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
	if hc := c.cfg.Routing.HeadersColumn; hc != "" {
		// Every event of a table without it would be an error.
		switch got, ok := cols[hc]; {
		case !ok:
			fails = append(fails, fmt.Sprintf("no column %q (routing.headers_column): every event would be an error", hc))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s jsonb;", c.tbl, pgx.Identifier{hc}.Sanitize()))
		case !slices.Contains([]string{"jsonb", "json", "text", "character varying"}, got.typ):
			warns = append(warns, fmt.Sprintf("column %q (routing.headers_column) is %s; only a JSON object can be headers, anything else is an error of its event", hc, got.typ))
			fixes = append(fixes, "make it jsonb")
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

func (c *pgCheck) checkPublication(tableExists bool) {
	pub := &c.cdc
	name := pub.Publication
	plan := c.facts.PublicationPlan()
	if !plan.Missing {
		c.report(CheckPublication, plan.Verdict(name))
		return
	}
	create := plan.Create + ";"
	if *pub.CreatePublication && tableExists && c.facts.CanCreatePublication() {
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
