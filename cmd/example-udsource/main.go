// Command example-udsource is a Numaflow user-defined source written with
// the numaflow-go SDK, used by the tests and the deploy/ example. It
// produces EXAMPLE_TOTAL messages with ids 0..N-1 (the value is the id in
// decimal, padded to EXAMPLE_MSG_SIZE bytes with ":xxx..."), redelivers
// nacked ones, and records acked ids in EXAMPLE_STATE_FILE so that a
// restarted process never emits an acked id again but does emit every
// unacked one (at-least-once across restarts). Pending is the number of ids
// not acked yet.
//
// Environment: MV_UDS_DIR (socket directory, default /var/run/numaflow),
// EXAMPLE_TOTAL (default 1000000), EXAMPLE_MSG_SIZE (default 0: just the
// id), EXAMPLE_STATE_FILE (default none: nothing survives a restart).
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
	"sync"
	"time"

	"github.com/numaproj/numaflow-go/pkg/sourcer"
)

// eventBase is the event time of id 0; id n happened n milliseconds later.
var eventBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	log.SetPrefix("example-udsource: ")
	dir := env("MV_UDS_DIR", "/var/run/numaflow")
	total := envInt("EXAMPLE_TOTAL", 1_000_000)
	size := envInt("EXAMPLE_MSG_SIZE", 0)
	src, err := newSource(total, size, os.Getenv("EXAMPLE_STATE_FILE"))
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	log.Printf("serving %d messages of %d bytes (%d already acked) on %s", total, size, src.ackedCount, filepath.Join(dir, "source.sock"))
	err = sourcer.NewServer(src,
		sourcer.WithSockAddr(filepath.Join(dir, "source.sock")),
		sourcer.WithServerInfoFilePath(filepath.Join(dir, "sourcer-server-info")),
	).Start(context.Background())
	if err != nil {
		log.Fatal(err)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		log.Fatalf("invalid %s=%q: want a whole number, 0 or more", name, v)
	}
	return n
}

type source struct {
	total, size int

	mu         sync.Mutex
	next       int   // lowest id never emitted by this process
	queue      []int // nacked ids, emitted first
	inflight   map[int]bool
	acked      []bool
	ackedCount int
	state      *os.File
	wake       chan struct{}
}

func newSource(total, size int, stateFile string) (*source, error) {
	s := &source{total: total, size: size, inflight: map[int]bool{}, acked: make([]bool, total), wake: make(chan struct{})}
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

// take picks up to n ids to emit: nacked ones first, then new ones.
func (s *source) take(n int) ([]int, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int
	for len(ids) < n && len(s.queue) > 0 {
		id := s.queue[0]
		s.queue = s.queue[1:]
		if !s.acked[id] && !s.inflight[id] {
			ids = append(ids, id)
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
	}
	return ids, s.wake
}

func (s *source) Read(ctx context.Context, req sourcer.ReadRequest, ch chan<- sourcer.Message) {
	timer := time.NewTimer(req.TimeOut())
	defer timer.Stop()
	for {
		ids, wake := s.take(int(req.Count()))
		for _, id := range ids {
			m := sourcer.NewMessage(value(id, s.size), sourcer.NewOffsetWithDefaultPartitionId([]byte(strconv.Itoa(id))),
				eventBase.Add(time.Duration(id)*time.Millisecond)).
				WithKeys([]string{"k" + strconv.Itoa(id%4)}).
				WithHeaders(map[string]string{"example-id": strconv.Itoa(id)})
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
		if len(ids) > 0 {
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func offsetID(o sourcer.Offset) (int, bool) {
	id, err := strconv.Atoi(string(o.Value()))
	return id, err == nil && id >= 0
}

// Ack records the ids in the state file before answering, so an acked id
// is never emitted again, even by a restarted process.
func (s *source) Ack(_ context.Context, req sourcer.AckRequest) {
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

func (s *source) Nack(_ context.Context, req sourcer.NackRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range req.Offsets() {
		id, ok := offsetID(o.Offset)
		if ok && s.inflight[id] {
			delete(s.inflight, id)
			s.queue = append(s.queue, id)
		}
	}
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
