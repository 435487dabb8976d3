package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// enqueue registers the messages of one request, all or none.
func (s *Source) enqueue(msgs []*runner.Message) (*request, int, error) {
	req := &request{done: make(chan struct{}), remaining: len(msgs)}
	if len(msgs) == 0 {
		close(req.done)
		return req, 0, nil
	}
	if len(msgs) > s.cfg.BufferSize {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("batch of %d events is above MV_HTTP_BUFFER_SIZE=%d; split it", len(msgs), s.cfg.BufferSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stopping {
		return nil, http.StatusInternalServerError, errors.New("the runner is shutting down; retry the request")
	}
	for _, m := range msgs {
		if _, dup := s.inflight[m.ID]; dup {
			return nil, http.StatusConflict, fmt.Errorf("a message with id %q is already in flight", m.ID)
		}
	}
	if len(s.queue)+len(msgs) > s.cfg.BufferSize {
		return nil, http.StatusTooManyRequests, fmt.Errorf("%d messages are waiting (MV_HTTP_BUFFER_SIZE=%d); retry later", len(s.queue), s.cfg.BufferSize)
	}
	for _, m := range msgs {
		e := &entry{msg: m, id: m.ID, req: req}
		m.Offset = e
		s.inflight[e.id] = e
		s.queue = append(s.queue, e)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return req, 0, nil
}

// abandon takes back the messages of a request whose caller hung up, as far
// as they were not read yet; read ones finish normally.
func (s *Source) abandon(msgs []*runner.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := map[*entry]bool{}
	for _, m := range msgs {
		e := m.Offset.(*entry)
		switch e.state {
		case queued:
			e.state = finished
			gone[e] = true
			if s.inflight[e.id] == e {
				delete(s.inflight, e.id)
			}
		case read:
			// It finishes without its caller: a result is then lost.
			e.req.gone = true
		}
	}
	if len(msgs) == 0 {
		return
	}
	if req := msgs[0].Offset.(*entry).req; req.remaining == 0 && !req.failed && s.mapper != nil && !req.gone {
		// Finished as the caller left: the answer was ready, no one took it.
		req.gone = true
		s.resultLost(msgs[0].Offset.(*entry).id, "the caller hung up as its result was ready")
	}
	if len(gone) == 0 {
		return
	}
	kept := s.queue[:0]
	for _, e := range s.queue {
		if !gone[e] {
			kept = append(kept, e)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// Read hands queued messages to the engine: it returns as soon as any are
// waiting (up to max), or after timeout with none. Latency matters more here
// than full batches: a caller is waiting for each message.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if n := min(max, len(s.queue)); n > 0 {
			out := make([]*runner.Message, n)
			for i, e := range s.queue[:n] {
				e.state = read
				out[i] = e.msg
			}
			clear(s.queue[:n])
			s.queue = s.queue[n:]
			if len(s.queue) > 0 {
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
			s.mu.Unlock()
			return out, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, nil
		}
		select {
		case <-s.wake:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// Ack answers the requests whose messages are now all final.
func (s *Source) Ack(_ context.Context, msgs []*runner.Message) error {
	return s.settle(msgs, "")
}

// Nack fails the requests of these messages: their callers get 500 and
// retry when they choose, so a delay has nothing to act on.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, _ runner.Nack) error {
	return s.settle(msgs, "the message could not be delivered")
}

func (s *Source) settle(msgs []*runner.Message, failure string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var foreign int
	for _, m := range msgs {
		e, ok := m.Offset.(*entry)
		if !ok {
			foreign++
			continue
		}
		s.finish(e, failure)
	}
	if foreign > 0 {
		return fmt.Errorf("http source: %d messages to settle were not read from it", foreign)
	}
	return nil
}

// finish makes one entry final; failure is empty for success. s.mu is held.
func (s *Source) finish(e *entry, failure string) {
	if e.state == finished {
		return
	}
	e.state = finished
	if s.inflight[e.id] == e {
		delete(s.inflight, e.id)
	}
	if failure != "" && !e.req.failed {
		e.req.failed = true
		e.req.reason = failure
	}
	e.req.remaining--
	if e.req.remaining == 0 {
		close(e.req.done)
		if e.req.gone && !e.req.failed && s.mapper != nil {
			s.resultLost(e.id, "the caller hung up before its messages were written")
		}
	}
}

// Pending is the number of messages waiting to be read.
func (s *Source) Pending(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.queue)), nil
}
