package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// This file is the client side of the Numaflow protocols that both bare
// clients (grpc-baseline and grpc-sequential) speak: the handshakes, one
// read, one transform, one sink write and one ack. The clients differ only
// in how many streams they open and how many batches they overlap.

// transformStream is a SourceTransformFn stream; nil means no transformer.
type transformStream = transformpb.SourceTransform_SourceTransformFnClient

// baselineBatch is one read batch travelling through a bare client.
type baselineBatch struct {
	offsets []*sourcepb.Offset
	results []*sourcepb.ReadResponse_Result
	values  [][]byte // what goes to the sink (after the transformer, if any)
	bytes   int64
}

// dialSDK connects to one SDK server's socket in dir, with the runner's
// message size limits; extra adds dial options (flow-control experiments).
func dialSDK(dir, sock string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
	}
	return grpc.NewClient("unix://"+filepath.Join(dir, sock), append(opts, extra...)...)
}

// sdkConns are a client's connections to the SDK servers: one per
// container, as Numaflow's sidecar clients have.
type sdkConns struct {
	src, sink *grpc.ClientConn
	tr        *grpc.ClientConn // nil without a transformer
}

// dialConns connects to the source and sink servers in dir, and to the
// transformer when transform is set.
func dialConns(dir string, transform bool, extra ...grpc.DialOption) (*sdkConns, error) {
	c := &sdkConns{}
	socks := map[string]**grpc.ClientConn{sourceSock: &c.src, sinkSock: &c.sink}
	if transform {
		socks[transformSock] = &c.tr
	}
	for sock, into := range socks {
		cc, err := dialSDK(dir, sock, extra...)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("connect to %s: %w", sock, err)
		}
		*into = cc
	}
	return c, nil
}

func (c *sdkConns) close() {
	for _, cc := range []*grpc.ClientConn{c.src, c.sink, c.tr} {
		if cc != nil {
			cc.Close()
		}
	}
}

// openRead opens a ReadFn stream and completes its handshake.
func openRead(ctx context.Context, cc *grpc.ClientConn) (sourcepb.Source_ReadFnClient, error) {
	s, err := sourcepb.NewSourceClient(cc).ReadFn(ctx)
	return handshake("ReadFn", s, err, &sourcepb.ReadRequest{Handshake: &sourcepb.Handshake{Sot: true}})
}

// openAck opens an AckFn stream and completes its handshake.
func openAck(ctx context.Context, cc *grpc.ClientConn) (sourcepb.Source_AckFnClient, error) {
	s, err := sourcepb.NewSourceClient(cc).AckFn(ctx)
	return handshake("AckFn", s, err, &sourcepb.AckRequest{Handshake: &sourcepb.Handshake{Sot: true}})
}

// openSink opens a SinkFn stream and completes its handshake.
func openSink(ctx context.Context, cc *grpc.ClientConn) (sinkpb.Sink_SinkFnClient, error) {
	s, err := sinkpb.NewSinkClient(cc).SinkFn(ctx)
	return handshake("SinkFn", s, err, &sinkpb.SinkRequest{Handshake: &sinkpb.Handshake{Sot: true}})
}

// openTransform opens a SourceTransformFn stream and completes its handshake.
func openTransform(ctx context.Context, cc *grpc.ClientConn) (transformStream, error) {
	s, err := transformpb.NewSourceTransformClient(cc).SourceTransformFn(ctx)
	return handshake[transformStream]("SourceTransformFn", s, err, &transformpb.SourceTransformRequest{Handshake: &transformpb.Handshake{Sot: true}})
}

// stream is the client side of a bidirectional Numaflow stream.
type stream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
}

// handshake completes the opening of a Numaflow stream (opened with err):
// it sends hello (the SOT handshake) and waits for the server's answer.
func handshake[S stream[Req, Resp], Req, Resp any](name string, s S, err error, hello Req) (S, error) {
	if err == nil {
		err = s.Send(hello)
	}
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		var none S
		return none, fmt.Errorf("open %s: %w", name, err)
	}
	return s, nil
}

// readBatch asks the source for n messages and collects them up to its EOT.
func readBatch(s sourcepb.Source_ReadFnClient, n int) (*baselineBatch, error) {
	req := &sourcepb.ReadRequest{Request: &sourcepb.ReadRequest_Request{NumRecords: uint64(n), TimeoutInMs: 1000}}
	if err := s.Send(req); err != nil {
		return nil, fmt.Errorf("send read request: %w", err)
	}
	b := &baselineBatch{}
	for {
		resp, err := s.Recv()
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if r := resp.GetResult(); r != nil {
			b.results = append(b.results, r)
			b.offsets = append(b.offsets, r.GetOffset())
			b.bytes += int64(len(r.GetPayload()))
		}
		if resp.GetStatus().GetEot() {
			return b, nil
		}
	}
}

// ackBatch acks a batch's offsets and waits for the source's answer.
func ackBatch(s sourcepb.Source_AckFnClient, b *baselineBatch) error {
	if err := s.Send(&sourcepb.AckRequest{Request: &sourcepb.AckRequest_Request{Offsets: b.offsets}}); err != nil {
		return fmt.Errorf("send ack: %w", err)
	}
	if _, err := s.Recv(); err != nil {
		return fmt.Errorf("receive ack: %w", err)
	}
	return nil
}

// messageIDs grows ids (reused between batches) to at least n entries.
func messageIDs(ids []string, n int) []string {
	for len(ids) < n {
		ids = append(ids, strconv.Itoa(len(ids)))
	}
	return ids
}

// fillValues sets b.values: the transformer's outputs when tr is set, the
// read payloads otherwise. The requests go out while the answers come
// back, as the runner's transformer (and Numaflow's) does: the server
// answers while later requests are still arriving.
func fillValues(tr transformStream, b *baselineBatch, ids []string) error {
	b.values = b.values[:0]
	if tr == nil {
		for _, r := range b.results {
			b.values = append(b.values, r.GetPayload())
		}
		return nil
	}
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
	return <-sent
}

// writeBatch sends b.values and an EOT over one SinkFn stream and waits
// for the results and the sink's EOT: Numaflow's sink exchange for one
// batch. It checks that every message got a result.
func writeBatch(sink sinkpb.Sink_SinkFnClient, b *baselineBatch, ids []string) error {
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
	return nil
}
