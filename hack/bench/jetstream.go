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
	streams := &feeder{h: h, name: "js-feed-" + sc.id()}
	// feed makes fresh streams for one side, fills the input and keeps
	// topping it up until stopped.
	feed := func(role string) (in, out string, stop func(), err error) {
		return streams.start(role, func(in, out string) []string {
			return []string{"js-load", "-url", url, "-in", in, "-out", out, "-n", strconv.Itoa(n), "-size", strconv.Itoa(sc.size)}
		})
	}
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			in, out, stop, err := feed("runner")
			if err != nil {
				return nanResult(), err
			}
			defer stop()
			return h.runRunnerSide(ctx, sc, batch, map[string]string{
				"MV_SOURCE":             "jetstream",
				"MV_SINK":               "jetstream",
				"MV_JETSTREAM_URL":      url,
				"MV_JETSTREAM_STREAM":   in,
				"MV_JETSTREAM_CONSUMER": "runner",
				"MV_JETSTREAM_SUBJECT":  out,
			}, srv)
		}},
		{"baseline", func(ctx context.Context, sc scenario) (sideResult, error) {
			in, out, stop, err := feed("baseline")
			if err != nil {
				return nanResult(), err
			}
			defer stop()
			return h.runPeerMeasure(ctx, sc, "baseline", "js-baseline",
				[]string{"-url", url, "-in", in, "-out", out, "-batch", strconv.Itoa(batch)})
		}},
	}, cleanup, nil
}
