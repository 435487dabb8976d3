package main

import (
	"context"
	"os"
	"strconv"
	"time"
)

// jsLag is the input kept ahead of each side's consumer, as kafkaLag.
const jsLag = 64 * MiB

// sidesJetStream runs the runner (MV_SOURCE=jetstream, MV_SINK=jetstream)
// and the bare nats.go loop against one nats-server process (max_payload
// 8 MiB), each on fresh in-memory streams filled with the same messages
// before it starts and topped up while it runs, so the window is the
// steady state of a consumer with a backlog.
func (h *harness) sidesJetStream(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, batchLatency)
	store, err := os.MkdirTemp("", "mvbjs")
	if err != nil {
		return nil, nil, err
	}
	srv, addr, err := h.startListening("nats-server-"+sc.id(), h.peerBin, func(port int) []string {
		return []string{"nats-server", "-port", strconv.Itoa(port), "-store", store}
	}, nil)
	if err != nil {
		os.RemoveAll(store)
		return nil, nil, err
	}
	cleanup := func() { srv.stop(10 * time.Second); os.RemoveAll(store) }
	url := "nats://" + addr
	n := max(jsLag/sc.size, 4*batch*inflight)
	// Fresh streams for each side, filled and kept topped up.
	streams := &feeder{h: h, name: "js-feed-" + sc.id(), args: func(in, out string) []string {
		return []string{"js-load", "-url", url, "-in", in, "-out", out, "-n", strconv.Itoa(n), "-size", strconv.Itoa(sc.size)}
	}}
	return []side{
		streams.side("runner", func(ctx context.Context, sc scenario, in, out string) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, map[string]string{
				"MV_SOURCE":             "jetstream",
				"MV_SINK":               "jetstream",
				"MV_JETSTREAM_URL":      url,
				"MV_JETSTREAM_STREAM":   in,
				"MV_JETSTREAM_CONSUMER": "runner",
				"MV_JETSTREAM_SUBJECT":  out,
			}, srv)
		}),
		streams.side("baseline", func(ctx context.Context, sc scenario, in, out string) (sideResult, error) {
			return h.runPeerMeasure(ctx, sc, "baseline", "js-baseline",
				[]string{"-url", url, "-in", in, "-out", out, "-batch", strconv.Itoa(batch)})
		}),
	}, cleanup, nil
}
