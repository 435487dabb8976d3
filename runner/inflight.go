package runner

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// RedeliversInFlight is implemented by sources that may deliver a message
// again while an earlier delivery of it is still being processed: a
// Numaflow user-defined source whose Read hands out every offset not yet
// acked, or JetStream once a message's ack wait ran out (a source that
// keeps state per delivery also implements DropNotifier). The engine then
// drops such a delivery, as numaflow-core's tracker does (source.rs: a
// DuplicateInflight insert is logged, counted in monovtx_dropped_total and
// not forwarded): the delivery in flight is acked or nacked for both, so
// the message is written once per time it is processed, not once per
// delivery. Sources that never deliver a message twice while it is in
// flight (the generator, Kafka, which tracks its records, the HTTP
// source, which refuses an ID in flight) need not implement it, and pay
// nothing for the check.
type RedeliversInFlight interface {
	RedeliversInFlight() bool
}

// inflightIDs are the source IDs of the messages read and not yet acked or
// handed back.
type inflightIDs struct {
	mu  sync.Mutex
	ids map[string]struct{}
	// warned is when the drops were last logged, unlogged how many were
	// dropped since: a source that re-reads whatever is not acked drops
	// on every read, and one line a minute says as much.
	warned   time.Time
	unlogged int
}

// warnEvery is how often dropped deliveries are logged at most.
const warnEvery = time.Minute

// DropNotifier is implemented by sources that keep state for each
// delivery (JetStream's in-progress acks): the engine tells them of a
// delivery it dropped as already in flight, which it never acks or nacks.
type DropNotifier interface {
	Dropped(msgs []*Message)
}

// dropRedelivered takes the messages whose source IDs are not in flight
// into the set and returns them; the rest are deliveries of a message in
// flight, which it drops, counts, gives back the payloads of and tells the
// source of. msgs is left as the source returned it.
func (e *Engine) dropRedelivered(msgs []*Message) []*Message {
	f := e.inflight
	var kept, dropped []*Message
	f.mu.Lock()
	for i, m := range msgs {
		// The key must stay what it is now whatever a stage does to ID.
		src := m.pinSourceID()
		if _, dup := f.ids[src]; dup {
			if kept == nil {
				kept = append(make([]*Message, 0, len(msgs)), msgs[:i]...)
			}
			dropped = append(dropped, m)
			continue
		}
		f.ids[src] = struct{}{}
		if kept != nil {
			kept = append(kept, m)
		}
	}
	var logNow bool
	var logCount int
	if len(dropped) > 0 {
		f.unlogged += len(dropped)
		if now := time.Now(); now.Sub(f.warned) >= warnEvery {
			f.warned, logNow, logCount, f.unlogged = now, true, f.unlogged, 0
		}
	}
	f.mu.Unlock()
	if len(dropped) == 0 {
		return msgs
	}
	e.totals.duplicates.add(len(dropped))
	e.totals.dropped.add(len(dropped))
	for _, m := range dropped {
		if m.Release != nil {
			m.Release()
			m.Release = nil
		}
	}
	if n, ok := e.src.(DropNotifier); ok {
		n.Dropped(dropped)
	}
	if logNow {
		e.log.Warnw("the source delivered messages that are still in flight; dropped them, as numaflow-core does: the delivery in flight settles them (logged at most once a minute; /status duplicate_dropped counts them all)",
			"count", logCount, "first", dropped[0].SourceID(), zap.String("source", e.kinds.Source))
	}
	return kept
}

// settled takes msgs, read by this engine, out of the set of messages in
// flight: they were acked, or handed back for redelivery.
func (e *Engine) settled(msgs []*Message) {
	f := e.inflight
	if f == nil {
		return
	}
	f.mu.Lock()
	for _, m := range msgs {
		delete(f.ids, m.SourceID())
	}
	f.mu.Unlock()
}
