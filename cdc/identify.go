package cdc

import (
	"context"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Identity is what a server says of itself on a replication connection
// (IDENTIFY_SYSTEM): which cluster it is, on which timeline, and the
// database the connection is for.
type Identity struct {
	// SystemID is the cluster's system_identifier: fixed at initdb, kept by
	// physical standbys and backups, new after a dump and restore or
	// pg_upgrade into a new cluster.
	SystemID string
	// Timeline goes up at every promotion of a standby or point-in-time
	// recovery.
	Timeline int32
	Database string
}

// CheckpointKey is the key a relay streaming from slot on this server
// saves its checkpoints under.
func (id Identity) CheckpointKey(slot string) connector.CheckpointKey {
	return connector.CheckpointKey{SystemID: id.SystemID, Database: id.Database, Slot: slot}
}

// Identify asks the server at url who it is. It uses a replication
// connection, which any role that may stream from a slot may open;
// pg_control_system(), the SQL way, is not granted to every such role.
// A connection pooler at url is refused here, at the relay's start.
func Identify(ctx context.Context, url string, network pgsql.Network) (Identity, error) {
	conn, err := connectReplication(ctx, url, network)
	if err != nil {
		return Identity{}, classify("open a replication connection to identify the server", err)
	}
	defer pgsql.Close(ctx, conn)
	qctx, cancel := network.Query(ctx)
	defer cancel()
	return identify(qctx, conn)
}

// identify runs IDENTIFY_SYSTEM on a replication connection.
func identify(ctx context.Context, conn *pgconn.PgConn) (Identity, error) {
	r, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return Identity{}, classify("identify the server (IDENTIFY_SYSTEM)", err)
	}
	return Identity{SystemID: r.SystemID, Timeline: r.Timeline, Database: r.DBName}, nil
}
