package jetstream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Pending is the consumer's NumPending (not yet delivered to any replica)
// plus NumAckPending (delivered, not yet acked), as Numaflow counts it. It
// is the count of the whole consumer, so every replica reports the same
// number, not its own share.
func (s *Source) Pending(ctx context.Context) (int64, error) {
	info, err := s.consumerInfo(ctx)
	if err != nil {
		return -1, err
	}
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}

// GroupProcessed counts the deliveries the whole consumer group has
// finished: every delivery so far minus those still awaiting an ack. From
// its growth each replica derives the group's processing rate for scaling
// (runner.GroupProgressReader). Redeliveries count again, which in steady
// operation is a rounding error; unlike the ack floor it does not stall
// while acks from several replicas arrive out of order.
func (s *Source) GroupProcessed(ctx context.Context) (int64, error) {
	info, err := s.consumerInfo(ctx)
	if err != nil {
		return 0, err
	}
	return int64(info.Delivered.Consumer) - int64(info.NumAckPending), nil
}

// progressLoop sends "in progress" for held messages the server has not
// heard about for a third of the ack wait, so a slow sink or a long retry
// does not make the server hand them to another replica meanwhile. It stops
// on Close; a runner that dies stops sending, and the messages come back.
func (s *Source) progressLoop() {
	defer close(s.done)
	every := s.cfg.AckWait / 3
	t := time.NewTicker(every)
	defer t.Stop()
	var due []jetstream.Msg
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			due = due[:0]
			s.mu.Lock()
			for jm, last := range s.held {
				if now.Sub(last) >= every {
					s.held[jm] = now
					due = append(due, jm)
				}
			}
			s.mu.Unlock()
			for _, jm := range due {
				if err := jm.InProgress(); err != nil {
					s.log.Debugw("in-progress not sent", "error", err)
				}
			}
		}
	}
}

// delivered is how often the server delivered jm; 0 when unknown.
func delivered(jm jetstream.Msg) uint64 {
	md, err := jm.Metadata()
	if err != nil {
		return 0
	}
	return md.NumDelivered
}
