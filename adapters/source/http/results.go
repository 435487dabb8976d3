package http

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/monovertex/monovertex/internal/cereply"
	"github.com/monovertex/monovertex/runner"
)

var _ runner.ResultTaker = (*Source)(nil)

// TakesResults is true with MV_HTTP_RESPONSE=result: the engine then
// hands over each message's written outputs before its ack.
func (s *Source) TakesResults() bool { return s.mapper != nil }

// Results keeps, for each message, the events the sinks wrote for it,
// with their data copied: the engine gives the payloads back after the
// ack, and the caller's answer is written after that.
func (s *Source) Results(msgs []*runner.Message, written [][]*runner.Message) {
	evs := make([][]event.Event, len(msgs))
	broken := make([]bool, len(msgs))
	for i := range msgs {
		for _, w := range written[i] {
			ev, err := s.mapper.ToEvent(w)
			if err != nil {
				// The engine names outputs from valid request IDs, so this
				// is a bug; the caller still learns that delivery worked.
				s.log.Errorw("http source: a result cannot be a CloudEvent; its caller gets the ack reply instead", "id", w.ID, "error", err)
				evs[i], broken[i] = nil, true
				break
			}
			ev.DataEncoded = bytes.Clone(w.Value)
			evs[i] = append(evs[i], ev)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		if e, ok := m.Offset.(*entry); ok {
			e.results, e.noResult = evs[i], broken[i]
		}
	}
}

// answerResults answers a request whose messages were all acked with what
// the sinks wrote for them: nothing is 204, one event (for a request of
// one message) a binary CloudEvent, anything else a CloudEvents batch in
// request order. A caller gone by now loses the answer, which is counted
// and logged; the messages stay written and acked.
func (s *Source) answerResults(w http.ResponseWriter, r *http.Request, msgs []*runner.Message, ids []string) {
	var evs []event.Event
	noResult := false
	for _, m := range msgs {
		e := m.Offset.(*entry)
		evs = append(evs, e.results...)
		noResult = noResult || e.noResult
	}
	if r.Context().Err() != nil {
		s.mu.Lock()
		s.resultLost(first(ids), "the caller hung up as its result was ready")
		s.mu.Unlock()
		return
	}
	var err error
	switch {
	case noResult:
		writeReply(w, http.StatusOK, reply{Message: "Data received successfully", ID: single(ids), IDs: many(ids)})
	case len(evs) == 0:
		w.WriteHeader(http.StatusNoContent)
	case len(evs) == 1 && len(msgs) == 1:
		err = cereply.Reply(w, r, evs[0])
	default:
		var b []byte
		if b, err = json.Marshal(evs); err != nil {
			s.log.Errorw("http source: results cannot be encoded; the caller gets the ack reply", "id", first(ids), "error", err)
			writeReply(w, http.StatusOK, reply{Message: "Data received successfully", ID: single(ids), IDs: many(ids)})
			return
		}
		w.Header().Set("Content-Type", event.ApplicationCloudEventsBatchJSON)
		w.WriteHeader(http.StatusOK)
		_, err = w.Write(b)
	}
	if err == nil {
		err = http.NewResponseController(w).Flush()
	}
	if err != nil {
		s.mu.Lock()
		s.resultLost(first(ids), "the caller's connection failed while its result was written")
		s.mu.Unlock()
	}
}

// first is a request's first message ID, for logs; empty for none.
func first(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// resultLost counts an answer no caller took and logs it: at once for the
// first, then at most once per lostLogEvery with the count since. s.mu is
// held.
func (s *Source) resultLost(id, why string) {
	s.lost.Inc()
	s.nLost.Add(1)
	if n, ok := s.lostLog.note(time.Now()); ok {
		s.log.Warnw("http source: messages were written and acked, but their result (MV_HTTP_RESPONSE=result) reached no caller; a caller that retries makes a duplicate",
			"request_id", id, "reason", why, "lost_since_last_line", n, "lost_total", s.nLost.Load())
	}
}

// ResultsLost is how many answers with results no caller took.
func (s *Source) ResultsLost() int64 { return s.nLost.Load() }

// lostLogEvery is the least time between two log lines about lost results.
const lostLogEvery = 10 * time.Second

// lostLog decides which lost results get a log line.
type lostLog struct {
	mu    sync.Mutex
	last  time.Time
	since int64
}

// note records one loss and reports whether to log now, with the losses
// since the last line.
func (l *lostLog) note(now time.Time) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since++
	if !l.last.IsZero() && now.Sub(l.last) < lostLogEvery {
		return 0, false
	}
	n := l.since
	l.last, l.since = now, 0
	return n, true
}

// flush takes the losses not logged yet.
func (l *lostLog) flush() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.since
	l.since = 0
	return n, n > 0
}
