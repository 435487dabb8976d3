package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"path/filepath"
	"sync/atomic"
	"time"

	numaflow "github.com/numaproj/numaflow-go/pkg"
	"github.com/numaproj/numaflow-go/pkg/sinker"
	"github.com/numaproj/numaflow-go/pkg/sourcer"
	"github.com/numaproj/numaflow-go/pkg/sourcetransformer"
)

// Numaflow's socket and server-info file names inside the shared directory.
const (
	sourceSock      = "source.sock"
	sourceInfo      = "sourcer-server-info"
	sinkSock        = "sink.sock"
	sinkInfo        = "sinker-server-info"
	transformSock   = "sourcetransform.sock"
	transformInfo   = "sourcetransformer-server-info"
	maxMessageBytes = 64 << 20
)

// fastSource answers every read with the full count at once: the runner,
// not the source, should be what limits a benchmark.
type fastSource struct {
	payload []byte
	seq     atomic.Uint64
	acked   atomic.Int64 // offsets acked, for the tests
}

// Read sends Count messages sharing one payload; the SDK marshals each, so
// sharing costs the reader nothing.
func (s *fastSource) Read(ctx context.Context, r sourcer.ReadRequest, ch chan<- sourcer.Message) {
	now := time.Now()
	for range r.Count() {
		off := make([]byte, 8)
		binary.BigEndian.PutUint64(off, s.seq.Add(1))
		m := sourcer.NewMessage(s.payload, sourcer.NewOffsetWithDefaultPartitionId(off), now)
		select {
		case ch <- m:
		case <-ctx.Done():
			return
		}
	}
}

// Ack has nothing to release (generated messages are not kept); it counts.
func (s *fastSource) Ack(_ context.Context, r sourcer.AckRequest) {
	s.acked.Add(int64(len(r.Offsets())))
}

// Nack has nothing to release either.
func (s *fastSource) Nack(context.Context, sourcer.NackRequest) {}

// Pending is unknown for an endless source.
func (s *fastSource) Pending(context.Context) int64 { return -1 }

// ActivePartitions is the SDK's single default partition.
func (s *fastSource) ActivePartitions(context.Context) []int32 { return sourcer.DefaultPartitions() }

// TotalPartitions is not reported.
func (s *fastSource) TotalPartitions(context.Context) *int32 { return nil }

// acceptSink is an ordinary user sink: the SDK calls Sink once per batch
// on a stream (one handler per stream, as with any numaflow-go sink), and
// it answers success for every message. It does nothing a user's sink
// would not do to be fast or to suit a client.
type acceptSink struct {
	received atomic.Int64 // messages seen, for the tests
	batches  atomic.Int64 // batches with at least one message
	// active and mostActive count Sink calls at once. The SDK calls Sink
	// again as soon as a batch is answered, to wait for the next one, so
	// this is the number of SinkFn streams a client kept busy: 1 under
	// Numaflow's contract.
	active, mostActive atomic.Int64
}

// Sink answers success for every message of the batch.
func (s *acceptSink) Sink(_ context.Context, ch <-chan sinker.Datum) sinker.Responses {
	n := s.active.Add(1)
	defer s.active.Add(-1)
	for m := s.mostActive.Load(); n > m && !s.mostActive.CompareAndSwap(m, n); m = s.mostActive.Load() {
	}
	res := sinker.ResponsesBuilder()
	for d := range ch {
		res = res.Append(sinker.ResponseOK(d.ID()))
	}
	s.received.Add(int64(len(res)))
	if len(res) > 0 {
		s.batches.Add(1)
	}
	return res
}

// identityTransformer returns each message unchanged.
type identityTransformer struct {
	received atomic.Int64 // messages seen, for the tests
}

// Transform returns the message with its keys and event time.
func (t *identityTransformer) Transform(_ context.Context, keys []string, d sourcetransformer.Datum) sourcetransformer.Messages {
	t.received.Add(1)
	return sourcetransformer.MessagesBuilder().Append(sourcetransformer.NewMessage(d.Value(), d.EventTime()).WithKeys(keys))
}

// The SDK servers with Numaflow's socket and server-info names in dir.

func sourceServer(dir string, src sourcer.Sourcer) numaflow.Server {
	return sourcer.NewServer(src,
		sourcer.WithSockAddr(filepath.Join(dir, sourceSock)),
		sourcer.WithServerInfoFilePath(filepath.Join(dir, sourceInfo)),
		sourcer.WithMaxMessageSize(maxMessageBytes),
	)
}

func sinkServer(dir string, sink sinker.Sinker) numaflow.Server {
	return sinker.NewServer(sink,
		sinker.WithSockAddr(filepath.Join(dir, sinkSock)),
		sinker.WithServerInfoFilePath(filepath.Join(dir, sinkInfo)),
		sinker.WithMaxMessageSize(maxMessageBytes),
	)
}

func transformServer(dir string, tr sourcetransformer.SourceTransformer) numaflow.Server {
	return sourcetransformer.NewServer(tr,
		sourcetransformer.WithSockAddr(filepath.Join(dir, transformSock)),
		sourcetransformer.WithServerInfoFilePath(filepath.Join(dir, transformInfo)),
		sourcetransformer.WithMaxMessageSize(maxMessageBytes),
	)
}

func runUDSource(ctx context.Context, args []string) error {
	fs := newFlags("udsource")
	size := fs.Int("size", 1024, "payload bytes of every message")
	dir, err := parseDir(fs, args)
	if err != nil {
		return err
	}
	return sourceServer(dir, &fastSource{payload: bytes.Repeat([]byte{'x'}, *size)}).Start(ctx)
}

func runUDSink(ctx context.Context, args []string) error {
	dir, err := parseDir(newFlags("udsink"), args)
	if err != nil {
		return err
	}
	sink := &acceptSink{}
	err = sinkServer(dir, sink).Start(ctx)
	log.Printf("udsink: %d messages in %d batches, at most %d Sink calls (SinkFn streams) at once", sink.received.Load(), sink.batches.Load(), sink.mostActive.Load())
	return err
}

func runUDTransformer(ctx context.Context, args []string) error {
	dir, err := parseDir(newFlags("udtransformer"), args)
	if err != nil {
		return err
	}
	return transformServer(dir, &identityTransformer{}).Start(ctx)
}

// parseDir adds the SDK servers' -dir flag to fs, parses args and
// requires -dir.
func parseDir(fs *flag.FlagSet, args []string) (string, error) {
	dir := fs.String("dir", "", "directory of the sockets and server-info files (MV_UDS_DIR)")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *dir == "" {
		return "", fmt.Errorf("-dir is required")
	}
	return *dir, nil
}
