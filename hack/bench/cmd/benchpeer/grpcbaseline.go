package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
)

// runGRPCBaseline is the concurrent bare client: it drives the SDK servers
// with the Numaflow protocol and nothing else, with one ReadFn stream, one
// AckFn stream, and per in-flight slot one SinkFn (and SourceTransformFn)
// stream, the same batch size and the same number of batches in flight as
// the runner's multi-stream udsink. What it reaches is the ceiling of these
// protocols and servers on this machine when batches overlap; Numaflow's
// own contract (one sink stream, one batch at a time) is grpc-sequential.
func runGRPCBaseline(ctx context.Context, args []string) error {
	fs, win := measureFlags("grpc-baseline")
	dir := fs.String("dir", "", "directory of the SDK sockets")
	batchSize := fs.Int("batch", 500, "messages per read (MV_READ_BATCH_SIZE)")
	inflight := fs.Int("inflight", 4, "batches in flight (MV_INFLIGHT_BATCHES)")
	transform := fs.Bool("transform", false, "pass every batch through the source transformer")
	grpcWindow := fs.Int("window", 0, "gRPC initial stream and connection window in bytes (0: grpc-go's default, as the runner dials)")
	bufSize := fs.Int("buffer", 0, "gRPC read and write buffer size in bytes (0: grpc-go's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *batchSize <= 0 || *inflight <= 0 {
		return fmt.Errorf("-dir, a positive -batch and a positive -inflight are required")
	}
	var extra []grpc.DialOption
	if *grpcWindow > 0 {
		extra = append(extra, grpc.WithInitialWindowSize(int32(*grpcWindow)), grpc.WithInitialConnWindowSize(int32(*grpcWindow)))
	}
	if *bufSize > 0 {
		extra = append(extra, grpc.WithReadBufferSize(*bufSize), grpc.WithWriteBufferSize(*bufSize))
	}
	conns, err := dialConns(*dir, *transform, extra...)
	if err != nil {
		return err
	}
	defer conns.close()
	srcConn, sinkConn, trConn := conns.src, conns.sink, conns.tr

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, *inflight)
	toWork := make(chan *baselineBatch, *inflight)
	toAck := make(chan *baselineBatch, *inflight)
	var acked, ackedBytes atomic.Int64

	readStream, err := openRead(ctx, srcConn)
	if err != nil {
		return err
	}
	ackStream, err := openAck(ctx, srcConn)
	if err != nil {
		return err
	}

	// Reader: one read at a time, as the runner's read loop does.
	go func() {
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			b, err := readBatch(readStream, *batchSize)
			if err != nil {
				cancel(err)
				return
			}
			toWork <- b
		}
	}()

	// Workers: transform and write, each over its own streams.
	for range *inflight {
		go func() {
			if err := baselineWorker(ctx, sinkConn, trConn, toWork, toAck); err != nil {
				cancel(err)
			}
		}()
	}

	// Acker: one ack stream; frees the slot once the source confirmed.
	go func() {
		for {
			var b *baselineBatch
			select {
			case b = <-toAck:
			case <-ctx.Done():
				return
			}
			if err := ackBatch(ackStream, b); err != nil {
				cancel(err)
				return
			}
			acked.Add(int64(len(b.offsets)))
			ackedBytes.Add(b.bytes)
			<-slots
		}
	}()

	return win.report(ctx, func() (int64, int64) { return acked.Load(), ackedBytes.Load() })
}

// baselineWorker is one in-flight slot of the concurrent client: its own
// SinkFn (and SourceTransformFn) stream, one batch at a time.
func baselineWorker(ctx context.Context, sinkConn, trConn *grpc.ClientConn, in <-chan *baselineBatch, out chan<- *baselineBatch) error {
	sink, err := openSink(ctx, sinkConn)
	if err != nil {
		return err
	}
	var tr transformStream // nil: no transformer
	if trConn != nil {
		if tr, err = openTransform(ctx, trConn); err != nil {
			return err
		}
	}
	var ids []string
	for {
		var b *baselineBatch
		select {
		case b = <-in:
		case <-ctx.Done():
			return nil
		}
		ids = messageIDs(ids, len(b.results))
		if err := fillValues(tr, b, ids); err != nil {
			return err
		}
		ids = messageIDs(ids, len(b.values))
		if err := writeBatch(sink, b, ids); err != nil {
			return err
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return nil
		}
	}
}
