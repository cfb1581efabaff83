package cdc

import "testing"

// The statements for each version are checked as text here, against the
// grammar of each version's documentation (CREATE_REPLICATION_SLOT in
// "Streaming Replication Protocol", and pg_create_logical_replication_slot
// in "Replication Management Functions"); the integration tests
// TestFailoverSlot* (17+) and TestStandbySource* (16+) run them on those
// servers.
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
		version    int
		set        *bool
		hotStandby bool
		want       bool
	}{
		{150018, nil, false, false},
		{170002, nil, false, true},
		{170002, &off, false, false},
		// 0A000: cannot enable failover for a replication slot created
		// on the standby.
		{170002, nil, true, false},
	} {
		s := &Source{cfg: Config{FailoverSlot: tc.set}, server: serverNotes{onHotStandby: tc.hotStandby}}
		if got := s.failover(tc.version); got != tc.want {
			t.Errorf("version %d, cdc.failover_slot %v, on a hot standby %v: failover %v, want %v", tc.version, tc.set, tc.hotStandby, got, tc.want)
		}
	}
}
