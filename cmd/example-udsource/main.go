// Command example-udsource is a Numaflow user-defined source written with
// the numaflow-go SDK, used by the tests and the deploy/ example. It
// produces EXAMPLE_TOTAL messages with ids 0..N-1 (the value is the id in
// decimal, padded to EXAMPLE_MSG_SIZE bytes with ":xxx..."), redelivers
// nacked ones, and records acked ids in EXAMPLE_STATE_FILE so that a
// restarted process never emits an acked id again but does emit every
// unacked one (at-least-once across restarts). Pending is the number of ids
// not acked yet.
//
// A nacked id is emitted again only after the delay of its nack options
// (NackOptions.Delay, milliseconds; none means at once), as a source that
// honours Numaflow's nack delay does.
//
// Environment: MV_UDS_DIR (socket directory, default /var/run/numaflow),
// EXAMPLE_TOTAL (default 1000000), EXAMPLE_MSG_SIZE (default 0: just the
// id), EXAMPLE_STATE_FILE (default none: nothing survives a restart).
//
// EXAMPLE_NACK_LOG=path appends one line per nacked id and one per
// redelivery of a nacked id, so a test can check that each redelivery came
// after its delay:
//
//	<id> TAB <nack time, unix ms> TAB <delay ms> TAB <max deliveries> TAB <reason>
//	<id> TAB <read time, unix ms> TAB redeliver
//
// (max deliveries 0 and an empty reason when the nack carried none), so a
// test can also check that the source saw what the sink's nack asked for.
//
// EXAMPLE_REDELIVER_AFTER=duration (Go syntax; default 0, off) makes it a
// queue with a visibility timeout, as SQS is: an id emitted and neither
// acked nor nacked for that long is emitted again by the next Read,
// whether or not its reader is still working on it. Numaflow drops such a
// delivery while the first is in flight (numaflow-core's tracker); the
// number of ids emitted again is written to EXAMPLE_REDELIVERED_FILE, when
// set, each time it grows.
//
// EXAMPLE_STRICT_READS=true makes the source one that is not safe for
// concurrent reads: Numaflow gives a source one read stream and one ack
// stream, so two Read calls (or two Ack calls) never overlap; if they do,
// the process logs which calls overlapped and exits with status 3.
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/numaproj/numaflow-go/pkg/sourcer"

	"github.com/monovertex/monovertex/internal/examplesrv"
)

// eventBase is the event time of id 0; id n happened n milliseconds later.
var eventBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	dir := examplesrv.Setup("example-udsource")
	total := examplesrv.Int("EXAMPLE_TOTAL", 1_000_000)
	size := examplesrv.Int("EXAMPLE_MSG_SIZE", 0)
	src, err := newSource(total, size, os.Getenv("EXAMPLE_STATE_FILE"))
	if err != nil {
		log.Fatal(err)
	}
	src.strict = os.Getenv("EXAMPLE_STRICT_READS") == "true"
	if v := os.Getenv("EXAMPLE_REDELIVER_AFTER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			log.Fatalf("EXAMPLE_REDELIVER_AFTER=%q: want a duration such as 50ms", v)
		}
		src.redeliverAfter = d
		src.redeliveredFile = os.Getenv("EXAMPLE_REDELIVERED_FILE")
	}
	if p := os.Getenv("EXAMPLE_NACK_LOG"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatalf("open EXAMPLE_NACK_LOG: %v", err)
		}
		src.nackLog = f
	}
	sock := filepath.Join(dir, "source.sock")
	examplesrv.Serve(sourcer.NewServer(src,
		sourcer.WithSockAddr(sock),
		sourcer.WithServerInfoFilePath(filepath.Join(dir, "sourcer-server-info")),
	).Start, "serving %d messages of %d bytes (%d already acked) on %s", total, size, src.ackedCount, sock)
}

type source struct {
	total, size int
	strict      bool     // EXAMPLE_STRICT_READS: exit when reads or acks overlap
	nackLog     *os.File // EXAMPLE_NACK_LOG, or nil

	reading, acking atomic.Int32 // Read and Ack calls running, for strict

	// redeliverAfter is EXAMPLE_REDELIVER_AFTER: ids in flight longer
	// are emitted again; redeliveredFile gets the count of those.
	redeliverAfter  time.Duration
	redeliveredFile string

	mu          sync.Mutex
	next        int      // lowest id never emitted by this process
	queue       []nacked // nacked ids, emitted first once due
	inflight    map[int]bool
	emitted     map[int]time.Time // with redeliverAfter: when each id in flight was last emitted
	redelivered int
	acked       []bool
	ackedCount  int
	state       *os.File
	wake        chan struct{}
}

// nacked is an id handed back by a nack, due for redelivery at due.
type nacked struct {
	id  int
	due time.Time
}

func newSource(total, size int, stateFile string) (*source, error) {
	s := &source{total: total, size: size, inflight: map[int]bool{}, emitted: map[int]time.Time{}, acked: make([]bool, total), wake: make(chan struct{})}
	if stateFile == "" {
		return s, nil
	}
	if b, err := os.ReadFile(stateFile); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			id, err := strconv.Atoi(sc.Text())
			if err != nil || id < 0 || id >= total {
				continue // a line cut short by a crash
			}
			if !s.acked[id] {
				s.acked[id] = true
				s.ackedCount++
			}
		}
	}
	f, err := os.OpenFile(stateFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open state file: %w", err)
	}
	s.state = f
	return s, nil
}

// Value is the payload of id: its decimal form, padded to size.
func value(id, size int) []byte {
	v := strconv.AppendInt(nil, int64(id), 10)
	if len(v)+1 < size {
		pad := make([]byte, size-len(v))
		pad[0] = ':'
		for i := 1; i < len(pad); i++ {
			pad[i] = 'x'
		}
		v = append(v, pad...)
	}
	return v
}

// take picks up to n ids to emit: nacked ones whose delay has passed
// first, then new ones. It also returns a channel closed by the next nack
// and the time the earliest nacked id still waiting is due (zero if none).
func (s *source) take(n int) ([]int, chan struct{}, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int
	var next time.Time
	now := time.Now()
	var redelivered []byte
	waiting := s.queue[:0]
	for _, q := range s.queue {
		switch {
		case s.acked[q.id] || s.inflight[q.id]:
			// Settled or emitted again meanwhile: nothing to redeliver.
		case len(ids) < n && !q.due.After(now):
			ids = append(ids, q.id)
			s.inflight[q.id] = true
			redelivered = fmt.Appendf(redelivered, "%d\t%d\tredeliver\n", q.id, now.UnixMilli())
		default:
			waiting = append(waiting, q)
			if next.IsZero() || q.due.Before(next) {
				next = q.due
			}
		}
	}
	s.queue = waiting
	s.logNacks(redelivered)
	if s.redeliverAfter > 0 {
		again := 0
		for id, at := range s.emitted {
			if len(ids) < n && s.inflight[id] && now.Sub(at) >= s.redeliverAfter {
				ids = append(ids, id)
				again++
			}
		}
		if again > 0 {
			s.redelivered += again
			if s.redeliveredFile != "" {
				if err := os.WriteFile(s.redeliveredFile, fmt.Appendf(nil, "%d\n", s.redelivered), 0o644); err != nil {
					log.Fatalf("write EXAMPLE_REDELIVERED_FILE: %v", err)
				}
			}
		}
	}
	for len(ids) < n && s.next < s.total {
		id := s.next
		s.next++
		if !s.acked[id] {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		s.inflight[id] = true
		if s.redeliverAfter > 0 {
			s.emitted[id] = now
		}
	}
	return ids, s.wake, next
}

// logNacks appends lines to EXAMPLE_NACK_LOG; s.mu is held.
func (s *source) logNacks(lines []byte) {
	if s.nackLog == nil || len(lines) == 0 {
		return
	}
	if _, err := s.nackLog.Write(lines); err != nil {
		log.Fatalf("write EXAMPLE_NACK_LOG: %v", err)
	}
}

// enter counts a call of kind on calls and, with EXAMPLE_STRICT_READS,
// ends the process when another call of the same kind is running.
func (s *source) enter(calls *atomic.Int32, kind string) {
	if n := calls.Add(1); s.strict && n > 1 {
		log.Printf("EXAMPLE_STRICT_READS: %d %s calls overlap; this source is not safe for concurrent %ss, and Numaflow gives a source one read stream and one ack stream", n, kind, kind)
		os.Exit(3)
	}
}

func (s *source) Read(ctx context.Context, req sourcer.ReadRequest, ch chan<- sourcer.Message) {
	s.enter(&s.reading, "Read")
	defer s.reading.Add(-1)
	timer := time.NewTimer(req.TimeOut())
	defer timer.Stop()
	for {
		ids, wake, due := s.take(int(req.Count()))
		if len(ids) > 0 {
			examplesrv.Deliver(ctx, ch, ids, s.message)
			return
		}
		if !s.wait(ctx, wake, due, timer.C) {
			return
		}
	}
}

// message is the message of id: its offset is the id, its event time
// eventBase plus id milliseconds.
func (s *source) message(id int) sourcer.Message {
	return sourcer.NewMessage(value(id, s.size), sourcer.NewOffsetWithDefaultPartitionId([]byte(strconv.Itoa(id))),
		eventBase.Add(time.Duration(id)*time.Millisecond)).
		WithKeys([]string{"k" + strconv.Itoa(id%4)}).
		WithHeaders(map[string]string{"example-id": strconv.Itoa(id)})
}

// wait blocks until a nack wakes the source, the earliest nacked id is due
// (true: try again), or the read times out or is cancelled (false).
func (s *source) wait(ctx context.Context, wake chan struct{}, due time.Time, timeout <-chan time.Time) bool {
	var dueC <-chan time.Time
	if !due.IsZero() {
		t := time.NewTimer(time.Until(due))
		defer t.Stop()
		dueC = t.C
	}
	select {
	case <-wake:
		return true
	case <-dueC:
		return true
	case <-timeout:
		return false
	case <-ctx.Done():
		return false
	}
}

func offsetID(o sourcer.Offset) (int, bool) {
	id, err := strconv.Atoi(string(o.Value()))
	return id, err == nil && id >= 0
}

// Ack records the ids in the state file before answering, so an acked id
// is never emitted again, even by a restarted process.
func (s *source) Ack(_ context.Context, req sourcer.AckRequest) {
	s.enter(&s.acking, "Ack")
	defer s.acking.Add(-1)
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []byte
	for _, o := range req.Offsets() {
		id, ok := offsetID(o)
		if !ok || id >= s.total {
			log.Printf("ack of an offset this source never made: %q", o.Value())
			continue
		}
		delete(s.inflight, id)
		delete(s.emitted, id)
		if !s.acked[id] {
			s.acked[id] = true
			s.ackedCount++
			lines = strconv.AppendInt(lines, int64(id), 10)
			lines = append(lines, '\n')
		}
	}
	if s.state != nil && len(lines) > 0 {
		if _, err := s.state.Write(lines); err != nil {
			log.Fatalf("write state file: %v", err)
		}
	}
}

// Nack hands ids back for redelivery once the delay of their nack options
// has passed.
func (s *source) Nack(_ context.Context, req sourcer.NackRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var lines []byte
	for _, o := range req.Offsets() {
		id, ok := offsetID(o.Offset)
		if ok && s.inflight[id] {
			var delay uint64
			var maxDeliveries uint32
			var reason string
			if opts := o.NackOptions; opts != nil {
				if opts.Delay != nil {
					delay = *opts.Delay
				}
				if opts.MaxDeliveries != nil {
					maxDeliveries = *opts.MaxDeliveries
				}
				if opts.Reason != nil {
					reason = strings.NewReplacer("\t", " ", "\n", " ").Replace(*opts.Reason)
				}
			}
			delete(s.inflight, id)
			delete(s.emitted, id)
			s.queue = append(s.queue, nacked{id: id, due: now.Add(time.Duration(delay) * time.Millisecond)})
			lines = fmt.Appendf(lines, "%d\t%d\t%d\t%d\t%s\n", id, now.UnixMilli(), delay, maxDeliveries, reason)
		}
	}
	s.logNacks(lines)
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *source) Pending(context.Context) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.total - s.ackedCount)
}

func (s *source) ActivePartitions(context.Context) []int32 { return sourcer.DefaultPartitions() }

func (s *source) TotalPartitions(context.Context) *int32 {
	n := int32(1)
	return &n
}
