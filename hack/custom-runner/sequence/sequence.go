// Package sequence is a source adapter written outside the monovertex
// module: MV_SOURCE=sequence reads MV_SEQUENCE_COUNT messages whose values
// are "<MV_SEQUENCE_PREFIX>-0", "-1", ..., then ends. It is the example of
// docs/writing-an-adapter.md, small on purpose; unacked and nacked messages
// are read again, so nothing is lost between the engine and the store.
package sequence

import (
	"context"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// Settings are the sequence source's variables, read by the runner with
// envconfig before New is called.
type Settings struct {
	Count  int    `envconfig:"MV_SEQUENCE_COUNT" default:"10" desc:"how many messages the source reads before it ends"`
	Prefix string `envconfig:"MV_SEQUENCE_PREFIX" default:"seq" desc:"what each message's value starts with"`
}

// Validate rejects a count the source cannot serve; the runner prints the
// error as one line and exits with status 2.
func (s *Settings) Validate(runner.Role) error {
	if s.Count < 1 {
		return &runner.ConfigError{Var: "MV_SEQUENCE_COUNT", Value: strconv.Itoa(s.Count), Reason: "must be 1 or more"}
	}
	return nil
}

func init() {
	runner.RegisterSource("sequence", func(_ context.Context, env runner.Env, s *Settings) (runner.Source, error) {
		store := NewStore()
		for i := range s.Count {
			store.Add(s.Prefix + "-" + strconv.Itoa(i))
		}
		store.End()
		env.Logger.Infow("sequence source ready", "count", s.Count)
		return New(store), nil
	})
}

// Store holds the messages waiting to be read and those read but not acked;
// several sources over one store share them, as consumers of a queue do.
type Store struct {
	mu      sync.Mutex
	next    int
	waiting []*runner.Message
	unacked map[string]*runner.Message
	ended   bool
	added   chan struct{} // closed and replaced by Add
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{unacked: map[string]*runner.Message{}, added: make(chan struct{})}
}

// Add queues one message with value v.
func (st *Store) Add(v string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.waiting = append(st.waiting, &runner.Message{ID: strconv.Itoa(st.next), Value: []byte(v), EventTime: time.Now()})
	st.next++
	close(st.added)
	st.added = make(chan struct{})
}

// End says no message will be added: Read returns io.EOF once every
// message was read and acked.
func (st *Store) End() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ended = true
}

// take moves up to max waiting messages to unacked; done is true when the
// store ended and holds nothing, wake is closed by the next Add.
func (st *Store) take(max int) (msgs []*runner.Message, done bool, wake <-chan struct{}) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := min(max, len(st.waiting))
	for _, m := range st.waiting[:n] {
		st.unacked[m.ID] = m
		// A copy, so the engine's changes to the message it is handed do
		// not reach the one kept for redelivery.
		c := *m
		msgs = append(msgs, &c)
	}
	st.waiting = st.waiting[n:]
	return msgs, st.ended && len(st.waiting) == 0 && len(st.unacked) == 0, st.added
}

// settle forgets acked messages, or queues them again (requeue).
func (st *Store) settle(msgs []*runner.Message, requeue bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range msgs {
		kept, ok := st.unacked[m.ID]
		if !ok {
			continue // never read, or settled already
		}
		delete(st.unacked, m.ID)
		if requeue {
			st.waiting = append(st.waiting, kept)
		}
	}
}

// Source reads from a Store.
type Source struct {
	store *Store
	// read are the messages this source handed out and nobody settled,
	// given back to the store on Close so that another source reads them.
	mu   sync.Mutex
	read map[string]*runner.Message
}

var (
	_ runner.Source = (*Source)(nil)
	_ runner.Nacker = (*Source)(nil)
)

// New returns a source over store.
func New(store *Store) *Source {
	return &Source{store: store, read: map[string]*runner.Message{}}
}

// Read returns up to max messages, waiting up to timeout for the first.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		msgs, done, wake := s.store.take(max)
		if len(msgs) > 0 {
			s.mu.Lock()
			for _, m := range msgs {
				s.read[m.ID] = m
			}
			s.mu.Unlock()
			return msgs, nil
		}
		if done {
			return nil, io.EOF
		}
		select {
		case <-wake:
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Ack forgets msgs for good.
func (s *Source) Ack(_ context.Context, msgs []*runner.Message) error {
	s.forget(msgs)
	s.store.settle(msgs, false)
	return nil
}

// Nack queues msgs to be read again; the store has no timer and counts
// no deliveries, so it ignores what the nack asked for.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, _ runner.Nack) error {
	s.forget(msgs)
	s.store.settle(msgs, true)
	return nil
}

func (s *Source) forget(msgs []*runner.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		delete(s.read, m.ID)
	}
}

// Close gives what this source read and nobody acked back to the store, as
// a broker does when a consumer goes away. A second Close does nothing.
func (s *Source) Close(context.Context) error {
	s.mu.Lock()
	back := make([]*runner.Message, 0, len(s.read))
	for _, m := range s.read {
		back = append(back, m)
	}
	s.read = map[string]*runner.Message{}
	s.mu.Unlock()
	s.store.settle(back, true)
	return nil
}
