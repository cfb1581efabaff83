package cdc

import "testing"

// Only PostgreSQL 15 runs here: the statements for other versions are
// checked as text, against the grammar of each version's documentation
// (CREATE_REPLICATION_SLOT in "Streaming Replication Protocol", and
// pg_create_logical_replication_slot in "Replication Management Functions").
func TestSlotStatements(t *testing.T) {
	for _, tc := range []struct {
		version  int
		failover bool
		command  string // with an exported snapshot
		sql      string // without
	}{
		{140010, true, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput EXPORT_SNAPSHOT`,
			`SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`},
		{150018, true, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'export')`,
			`SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`},
		{170002, true, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER)`,
			`SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`},
		{170002, false, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'export')`,
			`SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`},
	} {
		if got := createSlotCommand("s", tc.version, tc.failover); got != tc.command {
			t.Errorf("version %d, failover %v: command\n got %s\nwant %s", tc.version, tc.failover, got, tc.command)
		}
		if got := createSlotSQL(tc.version, tc.failover); got != tc.sql {
			t.Errorf("version %d, failover %v: sql\n got %s\nwant %s", tc.version, tc.failover, got, tc.sql)
		}
	}
}

func TestFailoverDefault(t *testing.T) {
	off := false
	for _, tc := range []struct {
		version int
		set     *bool
		want    bool
	}{
		{150018, nil, false},
		{170002, nil, true},
		{170002, &off, false},
	} {
		s := &Source{cfg: Config{FailoverSlot: tc.set}}
		if got := s.failover(tc.version); got != tc.want {
			t.Errorf("version %d, cdc.failover_slot %v: failover %v, want %v", tc.version, tc.set, got, tc.want)
		}
	}
}
