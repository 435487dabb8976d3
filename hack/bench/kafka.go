package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kafkaLag is the input kept ahead of each side's consumer group: a feeder
// fills the input topic with it before the side starts and tops it up
// while the side runs, so neither side runs dry and the cluster (which
// keeps records in memory) holds about this much unread input. Retention
// of 3x that per partition drops what was read. At 64 MiB the feeder's
// top-ups (a produce and flush every 20 ms or more) capped both sides at
// about 25,000 records of 64 KiB a second with a third of the CPU idle.
const kafkaLag = 256 * MiB

// feeder gives each side of a broker scenario fresh input and output
// topics or streams, filled by a benchpeer loader (kafka-load, js-load),
// which deletes the previous side's first.
type feeder struct {
	h    *harness
	name string
	args func(in, out string) []string // the loader's command line
	last []string
}

// side is a side that runs on fresh input and output, filled and kept
// topped up while run runs.
func (f *feeder) side(role string, run func(ctx context.Context, sc scenario, in, out string) (sideResult, error)) side {
	return side{role, func(ctx context.Context, sc scenario) (sideResult, error) {
		in, out, stop, err := f.start(role)
		if err != nil {
			return nanResult(), err
		}
		defer stop()
		return run(ctx, sc, in, out)
	}}
}

// start names the side's input and output, starts the loader with
// args(in, out) plus -follow (it fills the input and keeps topping it up
// until the returned stop) and returns once the first fill is stored.
func (f *feeder) start(role string) (in, out string, stop func(), err error) {
	k := procSeq.Add(1)
	in, out = fmt.Sprintf("in-%s-%d", role, k), fmt.Sprintf("out-%s-%d", role, k)
	a := f.args(in, out)
	if len(f.last) > 0 {
		a = append(a, "-delete", strings.Join(f.last, ","))
	}
	f.last = []string{in, out}
	ready := filepath.Join(f.h.work, fmt.Sprintf("ready-%03d", k))
	p, err := f.h.start(f.name, f.h.peerBin, append(a, "-follow", "-ready-file", ready), nil, false)
	if err != nil {
		return "", "", nil, err
	}
	stop = func() { p.stop(10 * time.Second) }
	if err := waitUntil("the input to be filled", 5*time.Minute, p, func() bool { return exists(ready) }); err != nil {
		stop()
		return "", "", nil, err
	}
	return in, out, stop, nil
}

// sidesKafka runs the runner (MV_SOURCE=kafka, MV_SINK=kafka) and the
// bare franz-go loop against one kfake process, each on fresh topics
// filled with the same records before it starts.
func (h *harness) sidesKafka(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, batchLatency)
	kf, brokers, err := h.startListening("kfake-"+sc.id(), h.kfakeBin, func(port int) []string {
		return []string{"-ports", strconv.Itoa(port), "-retention-every", "500ms"}
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { kf.stop(10 * time.Second) }
	n := kafkaLag / sc.size
	rec.Notes = append(rec.Notes, fmt.Sprintf("a feeder keeps %d records (%d MiB) of 6 partitions ahead of each side's group", n, kafkaLag/MiB))
	// Fresh topics for each side, filled and kept topped up; each side's
	// consumer group is named after its input.
	topics := &feeder{h: h, name: "kafka-feed-" + sc.id(), args: func(in, out string) []string {
		return []string{"kafka-load", "-brokers", brokers, "-in", in, "-out", out, "-n", strconv.Itoa(n), "-size", strconv.Itoa(sc.size),
			"-retention-bytes", strconv.Itoa(3 * kafkaLag / 6)}
	}}
	return []side{
		topics.side("runner", func(ctx context.Context, sc scenario, in, out string) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, map[string]string{
				"MV_SOURCE":                  "kafka",
				"MV_SINK":                    "kafka",
				"MV_KAFKA_BROKERS":           brokers,
				"MV_KAFKA_TOPIC":             in,
				"MV_KAFKA_GROUP":             "runner-" + in,
				"MV_KAFKA_SINK_TOPIC":        out,
				"MV_KAFKA_MAX_MESSAGE_BYTES": strconv.Itoa(16 << 20),
			})
		}),
		topics.side("baseline", func(ctx context.Context, sc scenario, in, out string) (sideResult, error) {
			return h.runPeerMeasure(ctx, sc, "baseline", "kafka-baseline",
				[]string{"-brokers", brokers, "-in", in, "-out", out, "-group", "baseline-" + in, "-batch", strconv.Itoa(batch)})
		}),
	}, cleanup, nil
}
