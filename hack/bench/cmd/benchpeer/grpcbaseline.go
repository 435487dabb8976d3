package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// baselineBatch is one read batch travelling through the bare client.
type baselineBatch struct {
	offsets []*sourcepb.Offset
	results []*sourcepb.ReadResponse_Result
	values  [][]byte // what goes to the sink (after the transformer, if any)
	bytes   int64
}

// runGRPCBaseline drives the SDK servers with the Numaflow protocol and
// nothing else: one ReadFn stream, one AckFn stream, and per in-flight slot
// one SinkFn (and SourceTransformFn) stream, the same batch size and the same
// number of batches in flight as the runner. What it reaches is the ceiling
// of these protocols and servers on this machine.
func runGRPCBaseline(ctx context.Context, args []string) error {
	fs := newFlags("grpc-baseline")
	dir := fs.String("dir", "", "directory of the SDK sockets")
	batchSize := fs.Int("batch", 500, "messages per read (MV_READ_BATCH_SIZE)")
	inflight := fs.Int("inflight", 4, "batches in flight (MV_INFLIGHT_BATCHES)")
	transform := fs.Bool("transform", false, "pass every batch through the source transformer")
	warmup := fs.Duration("warmup", 2*time.Second, "time before counting")
	duration := fs.Duration("duration", 10*time.Second, "measured time")
	grpcWindow := fs.Int("window", 0, "gRPC initial stream and connection window in bytes (0: grpc-go's default, as the runner dials)")
	bufSize := fs.Int("buffer", 0, "gRPC read and write buffer size in bytes (0: grpc-go's default)")
	dirty := fs.Bool("dirty-pool", false, "use a gRPC buffer pool that does not clear reused buffers (grpc-go's default pool clears them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *batchSize <= 0 || *inflight <= 0 {
		return fmt.Errorf("-dir, a positive -batch and a positive -inflight are required")
	}
	var dirtyOpt grpc.DialOption
	if *dirty {
		dirtyOpt = useDirtyPool()
	}
	dial := func(sock string) (*grpc.ClientConn, error) {
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
		}
		if *grpcWindow > 0 {
			opts = append(opts, grpc.WithInitialWindowSize(int32(*grpcWindow)), grpc.WithInitialConnWindowSize(int32(*grpcWindow)))
		}
		if dirtyOpt != nil {
			opts = append(opts, dirtyOpt)
		}
		if *bufSize > 0 {
			opts = append(opts, grpc.WithReadBufferSize(*bufSize), grpc.WithWriteBufferSize(*bufSize))
		}
		return grpc.NewClient("unix://"+filepath.Join(*dir, sock), opts...)
	}
	srcConn, err := dial(sourceSock)
	if err != nil {
		return fmt.Errorf("connect to the source: %w", err)
	}
	sinkConn, err := dial(sinkSock)
	if err != nil {
		return fmt.Errorf("connect to the sink: %w", err)
	}
	var trConn *grpc.ClientConn
	if *transform {
		if trConn, err = dial(transformSock); err != nil {
			return fmt.Errorf("connect to the transformer: %w", err)
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, *inflight)
	toWork := make(chan *baselineBatch, *inflight)
	toAck := make(chan *baselineBatch, *inflight)
	var acked, ackedBytes atomic.Int64

	src := sourcepb.NewSourceClient(srcConn)
	readStream, err := src.ReadFn(ctx)
	if err == nil {
		err = readStream.Send(&sourcepb.ReadRequest{Handshake: &sourcepb.Handshake{Sot: true}})
	}
	if err == nil {
		_, err = readStream.Recv()
	}
	if err != nil {
		return fmt.Errorf("open ReadFn: %w", err)
	}
	ackStream, err := src.AckFn(ctx)
	if err == nil {
		err = ackStream.Send(&sourcepb.AckRequest{Handshake: &sourcepb.Handshake{Sot: true}})
	}
	if err == nil {
		_, err = ackStream.Recv()
	}
	if err != nil {
		return fmt.Errorf("open AckFn: %w", err)
	}

	// Reader: one read at a time, as the runner's read loop does.
	go func() {
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			req := &sourcepb.ReadRequest{Request: &sourcepb.ReadRequest_Request{NumRecords: uint64(*batchSize), TimeoutInMs: 1000}}
			if err := readStream.Send(req); err != nil {
				cancel(fmt.Errorf("send read request: %w", err))
				return
			}
			b := &baselineBatch{}
			for {
				resp, err := readStream.Recv()
				if err != nil {
					cancel(fmt.Errorf("read: %w", err))
					return
				}
				if r := resp.GetResult(); r != nil {
					b.results = append(b.results, r)
					b.offsets = append(b.offsets, r.GetOffset())
					b.bytes += int64(len(r.GetPayload()))
				}
				if resp.GetStatus().GetEot() {
					break
				}
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
			if err := ackStream.Send(&sourcepb.AckRequest{Request: &sourcepb.AckRequest_Request{Offsets: b.offsets}}); err != nil {
				cancel(fmt.Errorf("send ack: %w", err))
				return
			}
			if _, err := ackStream.Recv(); err != nil {
				cancel(fmt.Errorf("receive ack: %w", err))
				return
			}
			acked.Add(int64(len(b.offsets)))
			ackedBytes.Add(b.bytes)
			<-slots
		}
	}()

	res, err := window(ctx, *warmup, *duration, func() (int64, int64) { return acked.Load(), ackedBytes.Load() })
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return err
	}
	return printResult(res)
}

func baselineWorker(ctx context.Context, sinkConn, trConn *grpc.ClientConn, in <-chan *baselineBatch, out chan<- *baselineBatch) error {
	sink, err := sinkpb.NewSinkClient(sinkConn).SinkFn(ctx)
	if err == nil {
		err = sink.Send(&sinkpb.SinkRequest{Handshake: &sinkpb.Handshake{Sot: true}})
	}
	if err == nil {
		_, err = sink.Recv()
	}
	if err != nil {
		return fmt.Errorf("open SinkFn: %w", err)
	}
	var tr transformpb.SourceTransform_SourceTransformFnClient
	if trConn != nil {
		tr, err = transformpb.NewSourceTransformClient(trConn).SourceTransformFn(ctx)
		if err == nil {
			err = tr.Send(&transformpb.SourceTransformRequest{Handshake: &transformpb.Handshake{Sot: true}})
		}
		if err == nil {
			_, err = tr.Recv()
		}
		if err != nil {
			return fmt.Errorf("open SourceTransformFn: %w", err)
		}
	}
	ids := make([]string, 0)
	for {
		var b *baselineBatch
		select {
		case b = <-in:
		case <-ctx.Done():
			return nil
		}
		for len(ids) < len(b.results) {
			ids = append(ids, strconv.Itoa(len(ids)))
		}
		b.values = b.values[:0]
		if tr != nil {
			// Send and receive at once, as the runner's transformer does:
			// the server answers while later requests are still arriving.
			sent := make(chan error, 1)
			go func() {
				for i, r := range b.results {
					req := &transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{
						Keys: r.GetKeys(), Value: r.GetPayload(), EventTime: r.GetEventTime(), Headers: r.GetHeaders(), Id: ids[i],
					}}
					if err := tr.Send(req); err != nil {
						sent <- fmt.Errorf("send to transformer: %w", err)
						return
					}
				}
				sent <- nil
			}()
			for range b.results {
				resp, err := tr.Recv()
				if err != nil {
					return fmt.Errorf("receive from transformer: %w", err)
				}
				for _, o := range resp.GetResults() {
					b.values = append(b.values, o.GetValue())
				}
			}
			if err := <-sent; err != nil {
				return err
			}
		} else {
			for _, r := range b.results {
				b.values = append(b.values, r.GetPayload())
			}
		}
		for len(ids) < len(b.values) {
			ids = append(ids, strconv.Itoa(len(ids)))
		}
		now := timestamppb.Now()
		sent := make(chan error, 1)
		go func() {
			for i, v := range b.values {
				if err := sink.Send(&sinkpb.SinkRequest{Request: &sinkpb.SinkRequest_Request{Value: v, Id: ids[i], EventTime: now}}); err != nil {
					sent <- fmt.Errorf("send to sink: %w", err)
					return
				}
			}
			if err := sink.Send(&sinkpb.SinkRequest{Status: &sinkpb.TransmissionStatus{Eot: true}}); err != nil {
				sent <- fmt.Errorf("send EOT to sink: %w", err)
				return
			}
			sent <- nil
		}()
		got := 0
		for {
			resp, err := sink.Recv()
			if err != nil {
				return fmt.Errorf("receive from sink: %w", err)
			}
			got += len(resp.GetResults())
			if resp.GetStatus().GetEot() {
				break
			}
		}
		if err := <-sent; err != nil {
			return err
		}
		if got != len(b.values) {
			return fmt.Errorf("the sink answered %d results for %d messages", got, len(b.values))
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return nil
		}
	}
}
