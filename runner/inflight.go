package runner

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// inflightIDs are the IDs, as the source gave them, of the messages read
// and not yet acked or handed back.
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

// dropRedelivered takes the messages whose IDs are not in flight into the
// set and returns them; the rest are deliveries of a message in flight,
// which it drops, counts, gives back the payloads of and tells the source
// of. msgs is left as the source returned it. The IDs are the source's:
// the engine names messages only as their batch starts, and gives them
// their own back before they leave the set (settled).
func (e *Engine) dropRedelivered(msgs []*Message) []*Message {
	f := e.inflight
	var kept, dropped []*Message
	f.mu.Lock()
	for i, m := range msgs {
		if _, dup := f.ids[m.ID]; dup {
			if kept == nil {
				kept = append(make([]*Message, 0, len(msgs)), msgs[:i]...)
			}
			dropped = append(dropped, m)
			continue
		}
		f.ids[m.ID] = struct{}{}
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
			"count", logCount, "first", dropped[0].ID, zap.String("source", e.kinds.Source))
	}
	return kept
}

// settled takes msgs, read by this engine and back under their source's
// IDs (sourceIDs), out of the set of messages in flight: they are being
// acked, or handed back for redelivery.
func (e *Engine) settled(msgs []*Message) {
	f := e.inflight
	if f == nil {
		return
	}
	f.mu.Lock()
	for _, m := range msgs {
		delete(f.ids, m.ID)
	}
	f.mu.Unlock()
}
