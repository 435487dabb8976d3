package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runNATSServer serves a nats-server with JetStream on 127.0.0.1, with a
// max_payload large enough for 1 MiB messages and their headers (the
// default is 1 MiB, payload and headers together).
func runNATSServer(ctx context.Context, args []string) error {
	fs := newFlags("nats-server")
	port := fs.Int("port", 4222, "client port on 127.0.0.1")
	store := fs.String("store", "", "JetStream store directory")
	httpPort := fs.Int("http", 0, "monitoring port on 127.0.0.1 (/varz, /connz, /jsz); 0: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return fmt.Errorf("-store is required")
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "bench", Host: "127.0.0.1", Port: *port,
		JetStream: true, StoreDir: *store, NoSigs: true,
		MaxPayload: 8 << 20, HTTPHost: "127.0.0.1", HTTPPort: *httpPort,
	})
	if err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats-server on 127.0.0.1:%d not ready after 30s", *port)
	}
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

// jsConnect connects to url and returns its JetStream context.
func jsConnect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// parseConnect parses a JetStream subcommand's args and connects to its
// -url.
func parseConnect(fs *flag.FlagSet, url *string, args []string) (*nats.Conn, jetstream.JetStream, error) {
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	return jsConnect(*url)
}

// runJSLoad deletes the streams of an earlier side, creates the input
// stream (a work queue: what is acked is gone, so the server holds only
// the unread input) and the output stream (the newest 256 MiB kept), both
// in memory, and publishes -n messages of -size bytes to the input. With
// -follow it then keeps the input about -n messages ahead of the output
// until stopped, so a consumer never runs dry.
func runJSLoad(ctx context.Context, args []string) error {
	fs := newFlags("js-load")
	url := fs.String("url", "", "NATS URL")
	f := feedFlags(fs, "stream (its subject is the same name)", 10000)
	nc, js, err := parseConnect(fs, url, args)
	if err != nil {
		return err
	}
	defer nc.Close()
	if f.del != "" {
		for _, s := range strings.Split(f.del, ",") {
			if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("delete stream %s: %w", s, err)
			}
		}
	}
	for _, cfg := range []jetstream.StreamConfig{
		{Name: f.in, Subjects: []string{f.in}, Storage: jetstream.MemoryStorage, Retention: jetstream.WorkQueuePolicy},
		{Name: f.out, Subjects: []string{f.out}, Storage: jetstream.MemoryStorage, MaxBytes: 256 << 20, Discard: jetstream.DiscardOld},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	value := f.value()
	publish := func(count int64) error {
		futures := make([]jetstream.PubAckFuture, 0, count)
		for range count {
			// A loaded server answers late: wait for room among the
			// outstanding publishes (the default is 200 ms) rather than
			// fail the fill.
			fut, err := js.PublishAsync(f.in, value, jetstream.WithStallWait(time.Minute))
			if err != nil {
				return err
			}
			futures = append(futures, fut)
		}
		return waitPubAcks(ctx, futures)
	}
	return f.run(ctx, publish, func() (int64, error) {
		// What was consumed is what reached the output (last sequences
		// only grow, unlike the message counts of limited streams).
		si, err := js.Stream(ctx, f.in)
		if err != nil {
			return 0, err
		}
		so, err := js.Stream(ctx, f.out)
		if err != nil {
			return 0, err
		}
		return int64(si.CachedInfo().State.LastSeq) - int64(so.CachedInfo().State.LastSeq), nil
	})
}

// waitPubAcks waits for the server to confirm every publish.
func waitPubAcks(ctx context.Context, futures []jetstream.PubAckFuture) error {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// runJSBaseline is the bare nats.go loop the runner's jetstream->jetstream
// is measured against: one durable pull consumer, fetch up to -batch
// messages, publish them all to the output (headers kept) and wait for
// every publish ack, ack the batch (the last ack confirmed by the server,
// one round trip per batch, as the runner's MV_JETSTREAM_ACK_SYNC=true
// default), repeat. It counts messages acked over the window.
func runJSBaseline(ctx context.Context, args []string) error {
	fs, win := measureFlags("js-baseline")
	url := fs.String("url", "", "NATS URL")
	in := fs.String("in", "", "input stream")
	out := fs.String("out", "", "output subject")
	batch := fs.Int("batch", 500, "messages per fetch (MV_READ_BATCH_SIZE)")
	same := fs.Bool("runner-headers", true, "publish with the headers the runner's jetstream->jetstream publishes (Mv-Event-Time, and the message ID as Nats-Msg-Id, which has the stream de-duplicate), so the server does the same work for both sides; false: the input's headers only")
	nc, js, err := parseConnect(fs, url, args)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, *in, jetstream.ConsumerConfig{
		Durable: "baseline", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 20000,
	})
	if err != nil {
		return fmt.Errorf("create consumer on %s: %w", *in, err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var acked, ackedBytes atomic.Int64
	go func() {
		cancel(jsLoop(ctx, js, cons, *out, *batch, *same, &acked, &ackedBytes))
	}()
	return win.report(ctx, func() (int64, int64) { return acked.Load(), ackedBytes.Load() })
}

// jsLoop moves batches until ctx ends (nil) or a call fails.
func jsLoop(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, out string, batch int, same bool, acked, ackedBytes *atomic.Int64) error {
	msgs := make([]jetstream.Msg, 0, batch)
	futures := make([]jetstream.PubAckFuture, 0, batch)
	for ctx.Err() == nil {
		fetched, err := cons.Fetch(batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		msgs = msgs[:0]
		for m := range fetched.Messages() {
			msgs = append(msgs, m)
		}
		if err := fetched.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			return fmt.Errorf("fetch: %w", err)
		}
		if len(msgs) == 0 {
			continue
		}
		futures = futures[:0]
		var bytes int64
		for _, m := range msgs {
			h := m.Headers()
			if same {
				h = sameJSHeaders(m)
			}
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: out, Data: m.Data(), Header: h})
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			futures = append(futures, f)
			bytes += int64(len(m.Data()))
		}
		if err := waitPubAcks(ctx, futures); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, m := range msgs[:len(msgs)-1] {
			if err := m.Ack(); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
		if err := msgs[len(msgs)-1].DoubleAck(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ack: %w", err)
		}
		acked.Add(int64(len(msgs)))
		ackedBytes.Add(bytes)
	}
	return nil
}

// sameJSHeaders is what the runner's JetStream source and sink make of m's
// headers with their defaults: the input's, the event time (the stored
// time) as Mv-Event-Time and the <stream>:<sequence> ID as Nats-Msg-Id.
func sameJSHeaders(m jetstream.Msg) nats.Header {
	meta, err := m.Metadata()
	if err != nil {
		return m.Headers()
	}
	h := make(nats.Header, len(m.Headers())+2)
	for k, v := range m.Headers() {
		h[k] = v
	}
	h[natsjsEventTime] = []string{meta.Timestamp.UTC().Format(time.RFC3339Nano)}
	h[nats.MsgIdHdr] = []string{meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)}
	return h
}

// natsjsEventTime is internal/natsjs.HeaderEventTime (not importable here).
const natsjsEventTime = "Mv-Event-Time"
