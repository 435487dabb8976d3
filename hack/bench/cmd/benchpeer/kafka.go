package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runKafkaLoad deletes the topics of an earlier side (their records would
// hold memory in the in-memory cluster), creates the input and output
// topics and fills the input with -n records of -size bytes, keyed k0..k63.
// With -follow it then keeps -in about -n records ahead of -out until
// stopped, so a consumer never runs dry and the cluster holds about -n
// records of unread input.
func runKafkaLoad(ctx context.Context, args []string) error {
	fs := newFlags("kafka-load")
	brokers := fs.String("brokers", "", "comma-separated brokers")
	f := feedFlags(fs, "topic", 100000)
	in, out, del := &f.in, &f.out, &f.del
	partitions := fs.Int("partitions", 6, "partitions of each topic")
	retention := fs.Int64("retention-bytes", -1, "retention.bytes of each partition of both topics (-1: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(16<<20), kgo.MaxBufferedBytes(256<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if *del != "" {
		if _, err := adm.DeleteTopics(ctx, strings.Split(*del, ",")...); err != nil {
			return fmt.Errorf("delete topics: %w", err)
		}
	}
	for _, t := range []string{*in, *out} {
		resp, err := adm.CreateTopic(ctx, int32(*partitions), 1, map[string]*string{
			"max.message.bytes": ptr(strconv.Itoa(16 << 20)), "retention.bytes": ptr(strconv.FormatInt(*retention, 10))}, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	value := f.value()
	var failed atomic.Int64
	var firstErr atomic.Value
	produce := func(count int64) error {
		for i := range count {
			cl.Produce(ctx, &kgo.Record{Topic: *in, Key: []byte("k" + strconv.FormatInt(i%64, 10)), Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		if failed.Load() > 0 {
			return fmt.Errorf("%d records not produced: %v", failed.Load(), firstErr.Load())
		}
		return nil
	}
	return f.run(ctx, produce, func() (int64, error) {
		// What was consumed is what reached the output: unlike committed
		// offsets it does not lag by a commit interval.
		ends, err := adm.ListEndOffsets(ctx, *in, *out)
		if err != nil {
			return 0, err
		}
		var lag int64
		ends.Each(func(e kadm.ListedOffset) {
			if e.Topic == *in {
				lag += e.Offset
			} else {
				lag -= e.Offset
			}
		})
		return lag, nil
	})
}

func ptr(s string) *string { return &s }

// sameHeaders is what the runner's Kafka source and sink make of r's
// headers with their defaults: the input's, X-NF-Kafka-TopicName (as
// Numaflow's Kafka source adds it), __key_len and __key_0 (Numaflow's
// Kafka sink carries the keys there) and Mv-Msg-Id (MV_KAFKA_SINK_ID_HEADER,
// the topic:partition:offset ID).
func sameHeaders(r *kgo.Record) []kgo.RecordHeader {
	h := make([]kgo.RecordHeader, 0, len(r.Headers)+4)
	h = append(h, r.Headers...)
	h = append(h, kgo.RecordHeader{Key: "X-NF-Kafka-TopicName", Value: []byte(r.Topic)})
	if r.Key != nil {
		h = append(h, kgo.RecordHeader{Key: "__key_len", Value: []byte("1")}, kgo.RecordHeader{Key: "__key_0", Value: r.Key})
	} else {
		h = append(h, kgo.RecordHeader{Key: "__key_len", Value: []byte("0")})
	}
	id := r.Topic + ":" + strconv.FormatInt(int64(r.Partition), 10) + ":" + strconv.FormatInt(r.Offset, 10)
	return append(h, kgo.RecordHeader{Key: "Mv-Msg-Id", Value: []byte(id)})
}

// runKafkaBaseline is the bare franz-go loop the runner's kafka->kafka is
// measured against: in one consumer group (read_committed, as the
// runner's default), poll up to -batch records,
// produce them all (idempotent, acks=all, keys and headers kept), wait for
// every ack, commit the batch's offsets, repeat. It counts records
// committed over the window.
func runKafkaBaseline(ctx context.Context, args []string) error {
	fs, win := measureFlags("kafka-baseline")
	brokers := fs.String("brokers", "", "comma-separated brokers")
	in := fs.String("in", "", "input topic")
	out := fs.String("out", "", "output topic")
	group := fs.String("group", "baseline", "consumer group")
	batch := fs.Int("batch", 500, "records per poll")
	same := fs.Bool("runner-headers", true, "write the headers the runner's kafka->kafka writes (the source topic, Numaflow's __key_len and __key_<i>, a message ID), so both sides produce the same records; false: the input's headers only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumerGroup(*group), kgo.ConsumeTopics(*in), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// The runner's default isolation (MV_KAFKA_ISOLATION_LEVEL), as
		// Numaflow's: the same fetches for both.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DefaultProduceTopic(*out), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(16<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	var done, doneBytes, failed atomic.Int64
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loopErr := make(chan error, 1)
	go func() {
		for lctx.Err() == nil {
			fs := cl.PollRecords(lctx, *batch)
			if lctx.Err() != nil {
				break
			}
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			outRecs := make([]*kgo.Record, len(recs))
			var bytes int64
			for i, r := range recs {
				h := r.Headers
				if *same {
					h = sameHeaders(r)
				}
				outRecs[i] = &kgo.Record{Key: r.Key, Value: r.Value, Headers: h, Timestamp: r.Timestamp}
				bytes += int64(len(r.Value))
			}
			if err := cl.ProduceSync(lctx, outRecs...).FirstErr(); err != nil {
				if lctx.Err() != nil {
					// The window ended while the batch was produced: a
					// produce the loop cut short did not fail.
					break
				}
				failed.Add(int64(len(recs)))
				continue
			}
			if err := cl.CommitRecords(lctx, recs...); err != nil && lctx.Err() == nil {
				loopErr <- fmt.Errorf("commit: %w", err)
				return
			}
			done.Add(int64(len(recs)))
			doneBytes.Add(bytes)
		}
		loopErr <- nil
	}()
	r, err := win.measure(ctx, func() (int64, int64) { return done.Load(), doneBytes.Load() })
	cancel()
	if lerr := <-loopErr; lerr != nil && err == nil {
		err = lerr
	}
	if err != nil {
		return err
	}
	r.Errors = failed.Load()
	return printResult(r)
}
