package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/initsql"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/poller"
)

// envAdminURL names the connection string --apply uses when --admin-url is
// not given; the environment keeps an admin password off the command line.
const envAdminURL = "OUTBOXRELAY_INIT_ADMIN_URL"

var initUsage = commandUsage{
	text: `Usage: outboxrelay init --config FILE [--role NAME] [--apply [--admin-url URL]]
       outboxrelay init --debezium-config FILE [--config FILE] [--role NAME] [--apply [--admin-url URL]]

Prints the SQL that sets up the database for the configuration: the outbox
table, the publication and replication slot (source: cdc) or the poller's
columns, index, dead-letter table and notify trigger (source: poll), and a
least-privilege role for the relay. Every statement can be run again.
`,
	docs: "docs/database.md#setting-up-the-database-outboxrelay-init",
}

// initCmd prints the SQL that sets up the database for the configuration,
// and with --apply runs it.
func initCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay init", initUsage)
	cf := addConfigFlags(fs)
	role := fs.String("role", "", "the relay's role (default: the user of postgres.url)")
	apply := fs.Bool("apply", false, "run the SQL (as --admin-url), not just print it")
	adminURL := fs.String("admin-url", "", "connection string of a superuser for --apply (default: $"+envAdminURL+", else postgres.url); its database is replaced by postgres.url's")
	noPassword := fs.Bool("no-password", false, "leave the role's password alone (default: set it to the password in postgres.url, if any)")
	noSlot := fs.Bool("no-slot", false, "do not create the replication slot (the relay creates it at first start)")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, _, err := cf.read(os.Environ(), false)
	if err != nil {
		return err
	}
	if cfg.Postgres.URL == "" {
		return errors.New("postgres.url is required: init takes the database and the relay's role from it")
	}
	pc, err := pgconn.ParseConfig(cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("postgres.url: cannot parse the connection string (%s)", secret.Redact(cfg.Postgres.URL))
	}
	// Every name the script holds is checked under its key before any of
	// it is printed or run: the source's own (poll checks its own in
	// initOptions), and the role and database, which the script's header
	// comment names too.
	if err := initNames(cfg, pc, *role); err != nil {
		return err
	}
	verifier := ""
	if !*noPassword && pc.Password != "" {
		if verifier, err = initsql.ScramVerifier(pc.Password); err != nil {
			fmt.Fprintf(stderr, "outboxrelay init: not setting the role's password: %v\n", err)
		}
	}
	// One script per outbox table (outbox.tables), each statement once.
	var scripts []initsql.Script
	if len(cfg.Outbox.TableNames()) == 0 {
		// Patterns alone: what they match changes as tables come and go.
		return fmt.Errorf("outboxrelay init: outbox.table_patterns name no table; init works on tables named in outbox.table or outbox.tables: name the ones to set up (outboxrelay debezium translate lists what a Debezium pattern matches now)")
	}
	for i, name := range cfg.Outbox.TableNames() {
		opts, err := initOptions(cfg, pc, *role, *noSlot, name, cfg.PollConfigs()[i])
		if err != nil {
			return err
		}
		opts.RoleVerifier = verifier
		s, err := initsql.Build(opts)
		if err != nil {
			return err
		}
		scripts = append(scripts, s)
	}
	script := initsql.Merge(scripts...)
	fmt.Fprint(stdout, script)
	if !*apply {
		return nil
	}

	admin := *adminURL
	if admin == "" {
		admin = os.Getenv(envAdminURL)
	}
	if admin == "" {
		admin = cfg.Postgres.URL
	}
	// The objects belong in the relay's database, whatever the admin's
	// connection string names.
	acfg, err := pgsql.Config(admin, cfg.Postgres.Network(),
		pgsql.Database(pc.Database), pgsql.Param("application_name", "outboxrelay-init"))
	if err != nil {
		return errors.New("--admin-url: cannot parse the connection string")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, acfg)
	if err != nil {
		return fmt.Errorf("connect to apply the SQL: %w", err)
	}
	defer pgsql.Close(ctx, conn)
	if err := initsql.Apply(ctx, conn, script); err != nil {
		return fmt.Errorf("apply (as %q; nothing of the transaction was kept): %w", acfg.User, err)
	}
	fmt.Fprintf(stderr, "outboxrelay init: applied to database %q as %q; `outboxrelay check` says whether everything is in place\n", pc.Database, acfg.User)
	return nil
}

// initNames checks the names init takes from elsewhere than the poller's
// configuration: the CDC source's, the role's and the database's.
func initNames(cfg *config.Config, pc *pgconn.Config, role string) error {
	var errs []error
	if cfg.Source == "cdc" {
		cc := cfg.CDCConfig()
		cc.SetDefaults()
		errs = append(errs, cc.ValidateNames())
	}
	if role != "" {
		errs = append(errs, pgident.CheckKey("--role", role))
	} else {
		errs = append(errs, pgident.CheckKey("postgres.url (its user, the relay's role)", pc.User))
	}
	errs = append(errs, pgident.CheckKey("postgres.url (its database)", pc.Database))
	return errors.Join(errs...)
}

// initOptions turns the configuration into what initsql needs, for the
// outbox table name and its poller configuration pcfg.
func initOptions(cfg *config.Config, pc *pgconn.Config, role string, noSlot bool, name string, pcfg poller.Config) (initsql.Options, error) {
	schema, table, err := cdc.SplitTable(name)
	if err != nil {
		return initsql.Options{}, err
	}
	if role == "" {
		role = pc.User
	}
	o := initsql.Options{
		Source: string(cfg.Source), Schema: schema, Table: table, Columns: cfg.ColumnsOf(name),
		HeadersColumn: cfg.Routing.HeadersColumn, Database: pc.Database, Role: role,
	}
	switch cfg.Source {
	case "cdc":
		cc := cfg.CDCConfig()
		cc.SetDefaults()
		o.Publication, o.Cleanup = cc.Publication, cc.Cleanup.Enabled
		if !noSlot {
			o.Slot = cc.Slot
		}
	case "poll":
		pcfg.SetDefaults()
		if err := pcfg.ValidateTable(); err != nil {
			return initsql.Options{}, err
		}
		o.PollerDDL = poller.DDL(pcfg)
		o.DeadLetterSchema, o.DeadLetterTable = schema, pcfg.DeadLetterTable
		if s, t, ok := strings.Cut(pcfg.DeadLetterTable, "."); ok {
			o.DeadLetterSchema, o.DeadLetterTable = s, t
		}
	}
	return o, nil
}
