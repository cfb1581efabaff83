package pgsql

import (
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/connector"
)

func TestTableKind(t *testing.T) {
	f := Facts{Database: "app", User: "relay"}
	table := Table{Schema: "public", Name: "outbox", Exists: true, Kind: "r", Owner: "owner"}
	for _, tc := range []struct {
		name   string
		source string
		edit   func(*Table)
		level  Level
		want   string
	}{
		{"table", "cdc", func(*Table) {}, OK, `"public"."outbox" exists, owned by "owner"`},
		{"missing", "cdc", func(t *Table) { t.Exists = false }, Fail, `outbox table "public"."outbox" does not exist in database "app"`},
		{"view", "poll", func(t *Table) { t.Kind = "v" }, Fail, "is not a table (relkind v)"},
		{"partitioned, cdc", "cdc", func(t *Table) { t.Kind, t.Children = "p", true }, OK, "exists"},
		{"partitioned, poll", "poll", func(t *Table) { t.Kind = "p" }, Fail, "is partitioned or has inheritance children"},
		{"inheritance, cdc", "cdc", func(t *Table) { t.Children = true }, Fail, "has inheritance children"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := table
			tc.edit(&tbl)
			v := f.TableKind(tc.source, tbl)
			if v.Level != tc.level || !strings.Contains(v.Detail, tc.want) {
				t.Fatalf("TableKind = %+v, want level %d saying %q", v, tc.level, tc.want)
			}
			if err := v.Err(); (err != nil) != (tc.level == Fail) || (err != nil && !connector.IsPermanent(err)) {
				t.Errorf("Err() = %v; want a permanent error only for Fail", err)
			}
		})
	}
}

func TestLogicalWALAndRole(t *testing.T) {
	if v := (Facts{WalLevel: "replica"}).LogicalWAL(); v.Level != Fail || !strings.Contains(v.Fix, "ALTER SYSTEM SET wal_level = logical") || !strings.Contains(v.Fix, "source: poll") {
		t.Errorf("replica: %+v", v)
	}
	if v := (Facts{WalLevel: "logical"}).LogicalWAL(); v.Level != OK {
		t.Errorf("logical: %+v", v)
	}
	for _, tc := range []struct {
		name  string
		f     Facts
		level Level
		want  string
	}{
		{"superuser", Facts{User: "pg", Super: true}, Warn, "least-privilege"},
		{"replication", Facts{User: "relay", Replication: true}, OK, ""},
		{"rds", Facts{User: "relay", RDSReplication: true}, OK, ""},
		{"neither", Facts{User: "re\"lay"}, Fail, `ALTER ROLE "re""lay" REPLICATION;`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.f.ReplicationRole()
			if v.Level != tc.level || !strings.Contains(v.Fix, tc.want) {
				t.Errorf("ReplicationRole = %+v, want level %d with fix %q", v, tc.level, tc.want)
			}
		})
	}
}

func TestPublicationPlan(t *testing.T) {
	outbox := Table{Schema: "public", Name: "outbox", Exists: true, Kind: "r", InPublication: true}
	parted := Table{Schema: "s", Name: "p", Exists: true, Kind: "p"}
	pub := Publication{Name: "pub", Exists: true, Insert: true}
	for _, tc := range []struct {
		name    string
		tables  []Table
		edit    func(*Publication)
		missing bool
		create  string
		want    []string // the verdict's detail and fix hold these
		adds    int
	}{
		{name: "fine", tables: []Table{outbox}, want: []string{`publication "pub" covers "public"."outbox" and publishes inserts`}},
		{name: "all tables, updates too", tables: []Table{outbox}, edit: func(p *Publication) { p.AllTables, p.Update = true, true },
			want: []string{"FOR ALL TABLES", "publish = 'insert' saves the work"}},
		{name: "missing", tables: []Table{outbox, parted}, edit: func(p *Publication) { p.Exists = false }, missing: true,
			create: `CREATE PUBLICATION "pub" FOR TABLE "public"."outbox", "s"."p" WITH (publish = 'insert', publish_via_partition_root = true)`},
		{name: "table left out, no inserts", tables: []Table{{Schema: "public", Name: "outbox", Exists: true, Kind: "r"}}, edit: func(p *Publication) { p.Insert = false },
			want: []string{`publication "pub" does not include "public"."outbox" and does not publish inserts`,
				`ALTER PUBLICATION "pub" ADD TABLE "public"."outbox"; ALTER PUBLICATION "pub" SET (publish = 'insert');`}, adds: 1},
		// pg_publication_tables lists the partitions then: not a missing table.
		{name: "partitions under their own names", tables: []Table{parted},
			want: []string{`sends the rows of partitioned table "s"."p" under each partition's name`, `ALTER PUBLICATION "pub" SET (publish_via_partition_root = true);`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Facts{Tables: tc.tables, Publication: pub}
			if tc.edit != nil {
				tc.edit(&f.Publication)
			}
			plan := f.PublicationPlan()
			if plan.Missing != tc.missing || (tc.create != "" && plan.Create != tc.create) {
				t.Fatalf("plan = %+v; want missing %v, create %q", plan, tc.missing, tc.create)
			}
			adds := 0
			for _, p := range plan.Problems {
				if p.Add != nil {
					adds++
				}
			}
			if adds != tc.adds {
				t.Errorf("%d tables to add, want %d: %+v", adds, tc.adds, plan.Problems)
			}
			v := plan.Verdict("pub")
			for _, w := range tc.want {
				if !strings.Contains(v.Detail+" | "+v.Fix, w) {
					t.Errorf("verdict %+v does not say %q", v, w)
				}
			}
		})
	}
}

func TestStandbySource(t *testing.T) {
	for _, tc := range []struct {
		name       string
		inRecovery bool
		version    int
		level      Level
		want       []string
	}{
		{"primary", false, 150000, OK, []string{"a primary"}},
		{"standby of 15", true, 150014, Fail, []string{"is a standby", "PostgreSQL 15 decodes no changes on a standby", "target_session_attrs=read-write"}},
		{"standby of 16", true, 160000, OK, []string{"a hot standby", "publication is made on the primary", "hot_standby_feedback"}},
		{"standby of 18", true, 180004, OK, []string{"a hot standby"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Facts{InRecovery: tc.inRecovery, VersionNum: tc.version}.StandbySource()
			if v.Level != tc.level {
				t.Errorf("level %d, want %d: %+v", v.Level, tc.level, v)
			}
			for _, w := range tc.want {
				if !strings.Contains(v.Detail+" | "+v.Fix, w) {
					t.Errorf("%+v does not say %q", v, w)
				}
			}
			if err := v.Err(); (err != nil) != (tc.level == Fail) || (err != nil && !connector.IsPermanent(err)) {
				t.Errorf("Err() = %v; want a permanent error only for Fail", err)
			}
		})
	}
}

// TestProviderAdvice: on a managed service the fix for a role without
// REPLICATION, and for wal_level, is that service's own: its role or
// flag, and who may grant it.
func TestProviderAdvice(t *testing.T) {
	for _, tc := range []struct {
		provider  Provider
		role, wal []string
	}{
		{SelfManaged, []string{`as a superuser: ALTER ROLE "relay" REPLICATION;`}, []string{"ALTER SYSTEM SET wal_level = logical", "rds.logical_replication = 1", "cloudsql.logical_decoding = on"}},
		{RDS, []string{"GRANT rds_replication TO \"relay\";", "rds_superuser"}, []string{"rds.logical_replication = 1", "DB cluster parameter group", "reboot"}},
		{CloudSQL, []string{`ALTER ROLE "relay" WITH REPLICATION;`, "cloudsqlsuperuser", "cloudsql.logical_decoding"}, []string{"cloudsql.logical_decoding to on"}},
		{Azure, []string{`ALTER ROLE "relay" WITH REPLICATION;`, "azure_pg_admin"}, []string{"server parameter wal_level to logical"}},
	} {
		t.Run(tc.provider.Name(), func(t *testing.T) {
			f := Facts{User: "relay", WalLevel: "replica", Provider: tc.provider}
			for _, c := range []struct {
				v    Verdict
				want []string
			}{{f.ReplicationRole(), tc.role}, {f.LogicalWAL(), tc.wal}} {
				if c.v.Level != Fail {
					t.Errorf("level %d, want Fail: %+v", c.v.Level, c.v)
				}
				for _, w := range c.want {
					if !strings.Contains(c.v.Fix, w) {
						t.Errorf("fix %q does not say %q", c.v.Fix, w)
					}
				}
			}
		})
	}
}
