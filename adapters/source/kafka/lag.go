package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

type lagInfo struct {
	at        time.Time
	lag       int64
	processed int64
}

// lagValidFor is how long one lag query answers Pending and GroupProcessed.
const lagValidFor = 500 * time.Millisecond

// lagNow returns the group's lag and committed total, querying the
// brokers unless the last answer is younger than lagValidFor.
func (s *Source) lagNow(ctx context.Context) (lagInfo, error) {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	if time.Since(s.lag.at) < lagValidFor {
		return s.lag, nil
	}
	li, err := s.queryLag(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.lagErr.Store(&err)
		}
		return li, err
	}
	s.lagErr.Store(nil)
	s.lag = li
	return li, nil
}

// Ready reports whether the last lag query (every MV_PENDING_INTERVAL)
// reached the brokers.
func (s *Source) Ready(context.Context) error {
	if p := s.lagErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Source) queryLag(ctx context.Context) (lagInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.watchTopics(ctx); err != nil {
		return lagInfo{}, err
	}
	topics := s.cfg.topics()
	// A read_committed consumer reads up to the last stable offset, not
	// the high watermark: records of open transactions are not pending
	// yet (librdkafka's watermarks, and so Numaflow's pending, follow the
	// consumer's isolation level the same way).
	listEnds := s.adm.ListCommittedOffsets
	if s.cfg.Isolation == "read_uncommitted" {
		listEnds = s.adm.ListEndOffsets
	}
	ends, err := listEnds(ctx, topics...)
	if err != nil {
		return lagInfo{}, fmt.Errorf("kafka source: end offsets of %s: %w", s.cfg.Topic, err)
	}
	starts, err := s.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return lagInfo{}, fmt.Errorf("kafka source: start offsets of %s: %w", s.cfg.Topic, err)
	}
	committed, err := s.adm.FetchOffsets(ctx, s.cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil // nothing committed yet
	}
	if err != nil {
		return lagInfo{}, fmt.Errorf("kafka source: committed offsets of group %s: %w", s.cfg.Group, err)
	}
	var li lagInfo
	var perr error
	ends.Each(func(e kadm.ListedOffset) {
		if !s.topics[e.Topic] {
			return
		}
		if e.Err != nil {
			perr = e.Err
			return
		}
		start := e.Offset
		if st, ok := starts.Lookup(e.Topic, e.Partition); ok && st.Err == nil {
			start = st.Offset
		}
		pos := start
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At >= 0 {
			pos = max(c.At, start) // records below the log start are gone
		} else if s.cfg.StartOffset == "latest" {
			pos = e.Offset // the group will start at the end
		}
		li.lag += max(e.Offset-pos, 0)
		li.processed += pos
	})
	if perr != nil {
		return lagInfo{}, fmt.Errorf("kafka source: offsets of %s: %w", s.cfg.Topic, perr)
	}
	li.at = time.Now()
	return li, nil
}

// Pending is the whole group's lag: the end of each partition (its last
// stable offset under read_committed, else its high watermark) minus its
// committed offset, summed over the partitions of every topic read, the
// same number on every replica (as Numaflow's Kafka source counts it). Records read but not yet
// committed count as pending, as a JetStream consumer counts its unacked.
func (s *Source) Pending(ctx context.Context) (int64, error) {
	li, err := s.lagNow(ctx)
	if err != nil {
		return -1, err
	}
	return li.lag, nil
}

// GroupProcessed is the sum of the group's committed offsets: its growth is
// what every replica together finished, from which the runner derives the
// group rate behind monovtx_backlog_seconds.
func (s *Source) GroupProcessed(ctx context.Context) (int64, error) {
	li, err := s.lagNow(ctx)
	if err != nil {
		return 0, err
	}
	return li.processed, nil
}
