// Package replay publishes outbox events again beside a running relay
// (outboxrelay replay) and sends dead-lettered events on once their cause
// is fixed (outboxrelay dead-letters redrive), through the relay's own
// routing, converters and schema registry, into Kafka.
//
// It promises to leave the relay alone: it reads the outbox table with
// plain SELECTs in short transactions, writes nothing the relay reads
// (its progress goes to a compacted topic of its own), and with
// kafka.delivery exactly_once publishes in Kafka transactions under a
// transactional id of its own, so that it never fences the relay and a
// read_committed consumer never sees half a batch. Every record it
// publishes carries its event's id header, as the relay's do, and a
// header naming the replay or redrive it came from.
package replay

// Headers a replay or redrive adds to each record it publishes.
const (
	// HeaderReplay marks a record published again by a replay; its value
	// is the replay's id.
	HeaderReplay = "outboxrelay.replay"
	// HeaderRedrive marks a record a redrive sent on from the dead
	// letters, and a dead letter a redrive wrote anew for an event that
	// still cannot be published; its value is the redrive's id.
	HeaderRedrive = "outboxrelay.redrive"
	// HeaderRedriveFrom is where the dead letter a redrive acted on was:
	// topic/partition@offset, or the dead-letter table.
	HeaderRedriveFrom = "outboxrelay.redrive.from"
)
