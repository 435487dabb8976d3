package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/monovertex/monovertex/runner"
)

// Nack hands messages back: their partitions are read again from the
// earliest of them after the nack's delay (MV_KAFKA_NACK_DELAY when it
// asks for none), and until they are acked no commit passes them. With
// MaxDeliveries, a record this replica delivered that many times (each
// ending in a nack) is given up instead: it counts as final, so commits
// pass it, as a JetStream consumer's MaxDeliver stops a message. Kafka
// keeps no delivery count, so the count is this replica's: a record that
// moves to another replica in a rebalance starts again from 0 there.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, n runner.Nack) error {
	delay := n.Delay
	if delay <= 0 {
		delay = s.cfg.NackDelay
	}
	due := time.Now().Add(delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		h, ok := m.Offset.(*handle)
		if !ok || h == nil || s.parts[h.k] != h.pt {
			continue
		}
		if n.MaxDeliveries > 0 && s.givenUp(h, n) {
			continue
		}
		if !h.pt.nack(h.off) {
			continue
		}
		sk, exists := s.seeks[h.k]
		if !exists || sk.pt != h.pt {
			s.seeks[h.k] = seek{pt: h.pt, off: h.off, due: due}
			continue
		}
		// One seek per partition: back to the earliest, after the latest delay.
		sk.off = min(sk.off, h.off)
		if due.After(sk.due) {
			sk.due = due
		}
		s.seeks[h.k] = sk
	}
	s.cond.Broadcast()
	return nil
}

// snapshot collects the commit points that moved, runs the commit check on
// them, and marks them sent. Called with s.mu held.
func (s *Source) snapshot(parts []tp) (map[tp]kgo.EpochOffset, error) {
	out := map[tp]kgo.EpochOffset{}
	visit := func(p tp, pt *partTracker) error {
		off, epoch, ok := pt.toCommit()
		if !ok {
			return nil
		}
		if s.check != nil {
			if err := s.check.check(p, off); err != nil {
				return err
			}
		}
		out[p] = kgo.EpochOffset{Epoch: epoch, Offset: off}
		pt.committed = off
		return nil
	}
	if parts == nil {
		for p, pt := range s.parts {
			if err := visit(p, pt); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for _, p := range parts {
		if pt := s.parts[p]; pt != nil {
			if err := visit(p, pt); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// commit sends offsets and waits for the coordinator's answer.
func (s *Source) commit(ctx context.Context, cl *kgo.Client, offsets map[tp]kgo.EpochOffset) error {
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	cl.CommitOffsetsSync(ctx, byTopic(offsets),
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil && cerr == nil {
						cerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, e)
					}
				}
			}
		})
	if cerr != nil {
		return fmt.Errorf("kafka source: commit %d partitions of %s for group %s: %w", len(offsets), s.cfg.Topic, s.cfg.Group, cerr)
	}
	return nil
}

// commitAll commits every partition's final offset that moved.
func (s *Source) commitAll(ctx context.Context) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	offsets, err := s.snapshot(nil)
	pts := make(map[tp]*partTracker, len(offsets))
	for p := range offsets {
		pts[p] = s.parts[p]
	}
	s.mu.Unlock()
	if err != nil {
		s.failed(err)
		return err
	}
	if err := s.commit(ctx, s.cl, offsets); err != nil {
		// Send them again next time.
		s.mu.Lock()
		for p, pt := range pts {
			if pt.committed == offsets[p].Offset {
				pt.committed = -1
			}
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *Source) failed(err error) {
	s.fatal.CompareAndSwap(nil, &err)
	s.log.Errorw("commit check failed", "error", err)
}

func (s *Source) commitLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), max(10*time.Second, s.cfg.CommitInterval))
			if err := s.commitAll(ctx); err != nil {
				s.log.Warnw("commit failed; retried at the next interval", "error", err)
			}
			cancel()
		}
	}
}

// release runs when partitions are taken away. For a revoke (commit true)
// it waits up to MV_KAFKA_REVOKE_TIMEOUT for their records in flight to
// finish, then commits what is final; the rest is the new owner's to
// read. Polls cannot run meanwhile (BlockRebalanceOnPoll), so nothing more
// of these partitions is read. Lost partitions (the session expired) are
// only forgotten: another member may own them already.
func (s *Source) release(ctx context.Context, cl *kgo.Client, parts []tp, commit bool) {
	if len(parts) == 0 {
		return
	}
	start := time.Now()
	s.mu.Lock()
	revoking, released := s.revoking, s.released
	s.mu.Unlock()
	if revoking != nil && commit {
		revoking(parts)
	}
	deadline := start.Add(s.cfg.RevokeTimeout)
	timer := time.AfterFunc(s.cfg.RevokeTimeout, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	for commit && !s.closing && time.Now().Before(deadline) && s.inflight(parts) > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	var offsets map[tp]kgo.EpochOffset
	var cerr error
	if commit {
		offsets, cerr = s.snapshot(parts)
	}
	unfinished := 0
	var resume []tp
	for _, p := range parts {
		if pt := s.parts[p]; pt != nil {
			unfinished += pt.inflight + pt.nacked
		}
		delete(s.parts, p)
		delete(s.seeks, p)
		if s.paused[p] {
			delete(s.paused, p)
			resume = append(resume, p)
		}
		if s.check != nil {
			s.check.released(p)
		}
	}
	s.mu.Unlock()
	if resume != nil {
		cl.ResumeFetchPartitions(partitionLists(resume))
	}
	if cerr != nil {
		s.failed(cerr)
		return
	}
	how := "lost"
	if commit {
		how = "revoked"
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := s.commit(cctx, cl, offsets); err != nil {
			s.log.Warnw("commit at revoke failed; the new owner reads again from the last commit", "error", err)
		}
		cancel()
	}
	waited := time.Since(start)
	s.log.Infow("partitions "+how, "partitions", partitionLists(parts), "committed", len(offsets),
		"unfinished", unfinished, "waited", waited.Round(time.Millisecond).String())
	if released != nil {
		released(parts, commit, waited, unfinished)
	}
}

// inflight counts the records of parts handed to the engine and not yet
// acked or nacked. Called with s.mu held.
func (s *Source) inflight(parts []tp) int {
	n := 0
	for _, p := range parts {
		if pt := s.parts[p]; pt != nil {
			n += pt.inflight
		}
	}
	return n
}

// givenUp counts a delivery of h's record that ended in a nack with
// MaxDeliveries and, once there were that many, acks the record instead of
// handing it back, and reports true. Called with s.mu held.
func (s *Source) givenUp(h *handle, n runner.Nack) bool {
	if s.nacked == nil {
		s.nacked = map[*partTracker]map[int64]uint32{}
	}
	counts := s.nacked[h.pt]
	if counts == nil {
		counts = map[int64]uint32{}
		s.nacked[h.pt] = counts
	}
	counts[h.off]++
	if counts[h.off] < n.MaxDeliveries {
		return false
	}
	s.log.Warnw("record delivered as often as its nack's max_deliveries allows: given up, the partition's commit passes it", "topic", h.k.topic, "partition", h.k.p, "offset", h.off, "max_deliveries", n.MaxDeliveries, "reason", n.Reason)
	if h.pt.ack(h.off) && s.check != nil {
		s.check.acked(h.k, h.off)
	}
	s.forget(h)
	return true
}

// forget drops the nack count of h's record. Called with s.mu held.
func (s *Source) forget(h *handle) {
	if counts := s.nacked[h.pt]; counts != nil {
		delete(counts, h.off)
		if len(counts) == 0 {
			delete(s.nacked, h.pt)
		}
	}
}
