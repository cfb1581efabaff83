package pgsql

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// Level is how much a verdict matters.
type Level int

// Levels, from fine to fatal.
const (
	OK Level = iota
	Warn
	Fail
)

// Verdict is what a fact means for the relay: what is so (Detail) and,
// unless it is OK, what to do (Fix).
type Verdict struct {
	Level  Level
	Detail string
	Fix    string
}

// Err is the verdict as a source's error: nil unless it is Fail, then
// permanent, since no reconnect mends the catalog.
func (v Verdict) Err() error {
	if v.Level != Fail {
		return nil
	}
	return connector.Permanent(errors.New(v.Detail + ": " + v.Fix))
}

// LogicalWAL judges wal_level for logical replication.
func (f Facts) LogicalWAL() Verdict {
	if f.WalLevel != "logical" {
		return Verdict{Fail, fmt.Sprintf("wal_level is %q; logical replication needs %q", f.WalLevel, "logical"), f.Provider.logicalWALFix()}
	}
	return Verdict{Level: OK, Detail: "logical"}
}

// StandbySource judges a server that is a hot standby as the CDC
// source. PostgreSQL 16 and later decode changes on a standby; the relay
// then reads there and writes nothing, so what it would otherwise create
// (the publication) must come from the primary. Before 16 a standby
// decodes nothing.
func (f Facts) StandbySource() Verdict {
	switch {
	case !f.InRecovery:
		return Verdict{Level: OK, Detail: "a primary"}
	case f.VersionNum < 160000:
		return Verdict{Fail, fmt.Sprintf("the server at postgres.url is a standby (pg_is_in_recovery() is true), and PostgreSQL %d decodes no changes on a standby; 16 and later do", f.VersionNum/10000),
			"point postgres.url at the primary; to follow a failover, list every server with target_session_attrs=read-write (postgres://host1,host2/db?target_session_attrs=read-write) or use an address the failover moves"}
	}
	return Verdict{Level: OK, Detail: "a hot standby (pg_is_in_recovery() is true): the relay decodes here and writes nothing; the publication is made on the primary, the primary's wal_level must be logical, and the standby needs hot_standby_feedback = on with a primary_slot_name, or the primary removes catalog rows the slot needs and the slot is invalidated (docs/database.md#a-standby-as-the-source)"}
}

// ReplicationRole judges whether the role may stream changes, and warns
// of a superuser. Its fix is the provider's way (provider.go).
func (f Facts) ReplicationRole() Verdict {
	switch {
	case f.Super:
		return Verdict{Warn, fmt.Sprintf("role %q is a superuser: it works, but the relay needs only REPLICATION and SELECT on the outbox table", f.User),
			"give the relay a least-privilege role: outboxrelay init --role <name> prints the SQL"}
	case f.Replication || f.RDSReplication:
		return Verdict{Level: OK, Detail: fmt.Sprintf("role %q may stream changes (REPLICATION) and is not a superuser", f.User)}
	}
	return Verdict{Fail, fmt.Sprintf("role %q lacks the REPLICATION attribute that reading a replication slot needs", f.User), f.Provider.replicationFix(f.User)}
}

// TableKind judges whether source ("cdc" or "poll") can read the outbox
// table t: that it exists and is a table of a kind the source tells
// apart. Logical replication sends a partition's rows under the
// partition's name unless the publication publishes them via the root
// (Facts.PublicationPlan), and an inheritance child's rows always under
// its own: the stream, which knows the outbox by its name, would pass
// them by. The poller marks rows by ctid, which each partition or child
// numbers on its own.
func (f Facts) TableKind(source string, t Table) Verdict {
	tbl := t.Quoted()
	switch {
	case !t.Exists:
		return Verdict{Fail, fmt.Sprintf("outbox table %s does not exist in database %q, or role %q cannot see it", tbl, f.Database, f.User),
			"create it (outboxrelay init prints the SQL), or set outbox.table to yours"}
	case t.Kind != "r" && t.Kind != "p":
		return Verdict{Fail, fmt.Sprintf("%s is not a table (relkind %s)", tbl, t.Kind), "point outbox.table at a table"}
	case source == "poll" && (t.Partitioned() || t.Children):
		return Verdict{Fail, fmt.Sprintf("%s is partitioned or has inheritance children, and the poller cannot tell their rows apart (it marks rows by ctid, which each one numbers on its own)", tbl),
			"use source: cdc, or a table without partitions"}
	case t.Children && !t.Partitioned():
		return Verdict{Fail, fmt.Sprintf("%s has inheritance children, and logical replication sends their rows under their own names, which the relay would not know as the outbox's", tbl),
			"make it a partitioned table, or keep the events in the table itself"}
	}
	return Verdict{Level: OK, Detail: fmt.Sprintf("%s exists, owned by %q", tbl, t.Owner)}
}

// CreatePublicationSQL creates publication pub for tables (quoted
// names): inserts only, and with partitioned, a partitioned table's rows
// under its own name, which is the name the relay knows.
func CreatePublicationSQL(pub string, partitioned bool, tables ...string) string {
	with := "publish = 'insert'"
	if partitioned {
		with += ", publish_via_partition_root = true"
	}
	return fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (%s)", pgident.Quote(pub), strings.Join(tables, ", "), with)
}

// AddTableSQL adds table (a quoted name) to publication pub.
func AddTableSQL(pub, table string) string {
	return fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgident.Quote(pub), table)
}

// Problem is one thing wrong, with its fix: an SQL statement.
type Problem struct {
	Text, Fix string
	// Add is the table a publication lacks; adding it is the fix, which
	// the CDC source makes itself when cdc.create_publication allows.
	Add *Table
}

// PublicationPlan is the verdict on the publication for the outbox
// tables: missing (with the statement that creates it), or the problems
// it has.
type PublicationPlan struct {
	Missing bool
	// Create creates the publication as the relay needs it.
	Create string
	// Problems, in the order they are best read: partitions under
	// their own names or tables not in it, then inserts not published.
	Problems []Problem
	// Detail says what is so when there is no problem.
	Detail string
}

// CanCreatePublication reports whether the role may create the
// publication: it owns every outbox table and may create in the database.
func (f Facts) CanCreatePublication() bool {
	if !f.CreateOnDatabase {
		return false
	}
	for _, t := range f.Tables {
		if !t.Exists || !t.Owned {
			return false
		}
	}
	return true
}

// PublicationPlan judges the publication (read by ReadFacts) for the
// outbox tables.
func (f Facts) PublicationPlan() PublicationPlan {
	p := f.Publication
	pub := pgident.Quote(p.Name)
	var quoted []string
	var partitioned *Table
	for i, t := range f.Tables {
		quoted = append(quoted, t.Quoted())
		if t.Partitioned() && partitioned == nil {
			partitioned = &f.Tables[i]
		}
	}
	plan := PublicationPlan{Create: CreatePublicationSQL(p.Name, partitioned != nil, quoted...)}
	if !p.Exists {
		plan.Missing = true
		return plan
	}
	if partitioned != nil && !p.ViaRoot {
		// Not changed by the relay: the publication may serve other
		// readers, for whom the partitions' own names are the contract.
		// pg_publication_tables lists the partitions then, not the table.
		plan.Problems = append(plan.Problems, Problem{
			Text: fmt.Sprintf("sends the rows of partitioned table %s under each partition's name, which the relay would not know as the outbox's", partitioned.Quoted()),
			Fix:  fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true);", pub),
		})
	} else {
		for i, t := range f.Tables {
			if !t.InPublication {
				plan.Problems = append(plan.Problems, Problem{Text: "does not include " + t.Quoted(), Fix: AddTableSQL(p.Name, t.Quoted()) + ";", Add: &f.Tables[i]})
			}
		}
	}
	if !p.Insert {
		plan.Problems = append(plan.Problems, Problem{Text: "does not publish inserts", Fix: fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert');", pub)})
	}
	tables := strings.Join(quoted, ", ")
	plan.Detail = fmt.Sprintf("publication %q covers %s and publishes inserts", p.Name, tables)
	if p.AllTables {
		plan.Detail = fmt.Sprintf("publication %q is FOR ALL TABLES and publishes inserts; every table's changes are decoded and the relay skips all but %s", p.Name, tables)
	}
	if p.Update || p.Delete {
		plan.Detail += "; it also publishes updates or deletes, which the relay skips (publish = 'insert' saves the work)"
	}
	return plan
}

// Verdict is the plan as one verdict: problems joined, and a missing
// publication a failure (callers that may create it say so first).
func (p PublicationPlan) Verdict(name string) Verdict {
	if p.Missing {
		return Verdict{Fail, fmt.Sprintf("publication %q does not exist", name), "as the table's owner: " + p.Create + ";"}
	}
	if len(p.Problems) == 0 {
		return Verdict{Level: OK, Detail: p.Detail}
	}
	var texts, fixes []string
	for _, pr := range p.Problems {
		texts, fixes = append(texts, pr.Text), append(fixes, pr.Fix)
	}
	return Verdict{Fail, fmt.Sprintf("publication %q %s", name, strings.Join(texts, " and ")),
		"as the publication's owner: " + strings.Join(fixes, " ")}
}
