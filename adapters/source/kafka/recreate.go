package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// watchTopics looks each topic up by name and compares its ID with the one
// it is read under. It returns an error while a topic is missing, which
// makes the source not ready and its pending count unknown: there is
// nothing to read and no lag to scale on.
//
// A topic deleted and created again has a new ID, and franz-go never moves
// a consumer to it: the old partitions fail with UNKNOWN_TOPIC_ID for good
// (kgo's cursor.topicID; "the user must purge+re-add"), while the group's
// lag counts the new topic's records. The source then does what a restart
// would: it forgets the old topic's partitions, purges the topic from the
// client and subscribes to it again, so the group reads the new topic from
// its committed offsets (Kafka, and kfake, drop a deleted topic's commits,
// so that is MV_KAFKA_START_OFFSET).
func (s *Source) watchTopics(ctx context.Context) error {
	// Straight to a broker: kadm's metadata is cached for the client's
	// MetadataMinAge, and an entry cached before the delete hides it.
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range s.cfg.topics() {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return fmt.Errorf("kafka source: metadata of %s: %w", s.cfg.Topic, err)
	}
	details := make(map[string]kmsg.MetadataResponseTopic, len(resp.Topics))
	for _, rt := range resp.Topics {
		if rt.Topic != nil {
			details[*rt.Topic] = rt
		}
	}
	var missing []string
	for _, t := range s.cfg.topics() {
		td, ok := details[t]
		terr := kerr.ErrorForCode(td.ErrorCode)
		if !ok || errors.Is(terr, kerr.UnknownTopicOrPartition) || (terr == nil && len(td.Partitions) == 0) {
			s.topicGone(t, "was deleted: nothing of it can be read until it is created again")
			missing = append(missing, t)
			continue
		}
		if terr != nil {
			return fmt.Errorf("kafka source: metadata of topic %s: %w", t, terr)
		}
		id := kadm.TopicID(td.TopicID)
		s.topicMu.Lock()
		old := s.ids[t]
		s.topicMu.Unlock()
		if old != id && old != (kadm.TopicID{}) {
			s.topicGone(t, "was deleted and created again: the client stalls on the old topic's ID (UNKNOWN_TOPIC_ID)")
			s.resubscribe(t)
			s.topicMu.Lock()
			s.ids[t] = id
			s.topicMu.Unlock()
		}
		s.topicBack(t, id)
	}
	if missing != nil {
		return fmt.Errorf("kafka source: topic %s does not exist (deleted?); MV_KAFKA_TOPIC must name existing topics", strings.Join(missing, ", "))
	}
	return nil
}

// topicGone starts an episode of topic t being gone and logs it, at error
// level and once per episode: reading it has stopped, and only the
// operator can bring it back.
func (s *Source) topicGone(t, why string) {
	s.topicMu.Lock()
	_, already := s.gone[t]
	s.gone[t] = why
	s.topicMu.Unlock()
	if !already {
		s.log.Errorw("kafka topic "+why+"; the source is not ready until it is read again", "topic", t, "group", s.cfg.Group)
	}
}

// topicBack ends topic t's episode, if one was running.
func (s *Source) topicBack(t string, id kadm.TopicID) {
	s.topicMu.Lock()
	why, was := s.gone[t]
	delete(s.gone, t)
	s.topicMu.Unlock()
	if was {
		s.log.Infow("kafka topic exists again: reading it", "topic", t, "topicID", id.String(), "was", why)
	}
}

// resubscribe makes the client read topic t afresh, as a restarted runner
// would. The old topic's partitions are forgotten first, with no commit:
// their offsets belong to the old topic, and committing them under the
// name would skip the new topic's first records. Records of them still in
// flight are acked into nothing; they were read already.
func (s *Source) resubscribe(t string) {
	s.readMu.Lock() // no poll in flight while the subscription changes
	defer s.readMu.Unlock()
	s.commitMu.Lock()
	s.mu.Lock()
	var parts []tp
	for k := range s.parts {
		if k.topic == t {
			parts = append(parts, k)
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].p < parts[j].p })
	unfinished := 0
	var resume []tp
	for _, k := range parts {
		if s.paused[k] {
			resume = append(resume, k)
		}
		pt := s.parts[k]
		unfinished += pt.inflight + pt.nacked
		delete(s.parts, k)
		delete(s.seeks, k)
		delete(s.paused, k)
		if s.check != nil {
			s.check.released(k)
		}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.commitMu.Unlock()
	if resume != nil {
		// The client keeps pauses by name: the new topic must not start paused.
		s.cl.ResumeFetchPartitions(partitionLists(resume))
	}
	s.cl.PurgeTopicsFromConsuming(t)
	s.cl.AddConsumeTopics(t)
	s.log.Warnw("subscribed to the recreated topic again: the group reads it from its committed offsets, or from MV_KAFKA_START_OFFSET where it has none",
		"topic", t, "forgotPartitions", len(parts), "unfinished", unfinished, "startOffset", s.cfg.StartOffset)
}
