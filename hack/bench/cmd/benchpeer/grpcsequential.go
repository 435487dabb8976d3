package main

import (
	"context"
	"fmt"
	"sync/atomic"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
)

// runGRPCSequential is the sequential bare client: Numaflow's contract for
// user-defined containers with nothing around it. One stream per container
// (ReadFn and AckFn to the source, SourceTransformFn to the transformer
// when there is one, SinkFn to the sink) and one batch at a time: read,
// transform, write (requests, EOT, then the results and the sink's EOT),
// ack, and only then the next read. It is the ceiling of a runner that
// keeps Numaflow's one-stream sink contract (numaflow-core's
// sinker/sink/user_defined.rs) on this machine.
func runGRPCSequential(ctx context.Context, args []string) error {
	fs, win := measureFlags("grpc-sequential")
	dir := fs.String("dir", "", "directory of the SDK sockets")
	batchSize := fs.Int("batch", 500, "messages per read (MV_READ_BATCH_SIZE)")
	transform := fs.Bool("transform", false, "pass every batch through the source transformer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *batchSize <= 0 {
		return fmt.Errorf("-dir and a positive -batch are required")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c, err := openSequential(ctx, *dir, *transform)
	if err != nil {
		return err
	}
	defer c.close()
	var acked, ackedBytes atomic.Int64
	go func() {
		cancel(c.run(ctx, *batchSize, 0, &acked, &ackedBytes))
	}()
	return win.report(ctx, func() (int64, int64) { return acked.Load(), ackedBytes.Load() })
}

// sequentialClient holds the one stream per container of the sequential
// bare client.
type sequentialClient struct {
	conns *sdkConns
	read  sourcepb.Source_ReadFnClient
	ack   sourcepb.Source_AckFnClient
	tr    transformStream // nil without a transformer
	sink  sinkpb.Sink_SinkFnClient
	ids   []string
}

// openSequential connects to the SDK servers in dir and opens the streams.
func openSequential(ctx context.Context, dir string, transform bool) (c *sequentialClient, err error) {
	conns, err := dialConns(dir, transform)
	if err != nil {
		return nil, err
	}
	c = &sequentialClient{conns: conns}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.read, err = openRead(ctx, conns.src); err != nil {
		return c, err
	}
	if c.ack, err = openAck(ctx, conns.src); err != nil {
		return c, err
	}
	if conns.tr != nil {
		if c.tr, err = openTransform(ctx, conns.tr); err != nil {
			return c, err
		}
	}
	if c.sink, err = openSink(ctx, conns.sink); err != nil {
		return c, err
	}
	return c, nil
}

func (c *sequentialClient) close() { c.conns.close() }

// run moves batches of up to batch messages, one at a time, until ctx ends
// (nil) or, when limit > 0, exactly limit messages are acked (the last read
// asks for what is left). acked and ackedBytes count what the source
// confirmed; a batch is counted only after its ack came back.
func (c *sequentialClient) run(ctx context.Context, batch int, limit int64, acked, ackedBytes *atomic.Int64) error {
	var moved int64
	for ctx.Err() == nil && (limit <= 0 || moved < limit) {
		n := batch
		if limit > 0 {
			n = int(min(int64(batch), limit-moved))
		}
		b, err := c.move(n)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		moved += int64(len(b.offsets))
		acked.Add(int64(len(b.offsets)))
		ackedBytes.Add(b.bytes)
	}
	return nil
}

// move reads one batch of up to n messages, transforms it (when there is a
// transformer), writes it to the sink and acks it, each step finished
// before the next begins.
func (c *sequentialClient) move(n int) (*baselineBatch, error) {
	b, err := readBatch(c.read, n)
	if err != nil {
		return nil, err
	}
	if len(b.results) == 0 {
		return b, nil // an empty read (the source had nothing): nothing to write or ack
	}
	c.ids = messageIDs(c.ids, len(b.results))
	if err := fillValues(c.tr, b, c.ids); err != nil {
		return nil, err
	}
	c.ids = messageIDs(c.ids, len(b.values))
	if err := writeBatch(c.sink, b, c.ids); err != nil {
		return nil, err
	}
	if err := ackBatch(c.ack, b); err != nil {
		return nil, err
	}
	return b, nil
}
