package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Ordering scenario settings: keys the generator spreads messages over,
// and how long the receiver takes per event.
const (
	orderingKeys  = 100
	orderingDelay = 2 * time.Millisecond
)

// orderingFamilies compare MV_ORDERING=key with unordered delivery (issue
// 39) where ordering costs: a sink that takes a while per event, so
// throughput comes from events in flight at once, which key ordering
// bounds by one per key.
func orderingFamilies() []*family {
	return []*family{{
		name: "generator->cloudevents(2ms)/ordering=key", sizes: []int{KiB},
		needs:    []string{"MV_SOURCE=generator", "MV_SINK=cloudevents"},
		baseline: "the same runner with MV_ORDERING=unordered",
		what: "MV_ORDERING=key over " + strconv.Itoa(orderingKeys) + " generator keys into a CloudEvents receiver in the bench process that answers each event after " +
			orderingDelay.String() + " (MV_CE_SINK_CONCURRENCY 64, the default)",
		sides: (*harness).sidesOrdering,
	}}
}

func (h *harness) sidesOrdering(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, batchLatency)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(orderingDelay)
		w.WriteHeader(http.StatusAccepted)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	env := merge(generatorEnv(sc.size), map[string]string{
		"MV_GENERATOR_KEY_COUNT": strconv.Itoa(orderingKeys),
		"MV_SINK":                "cloudevents",
		"K_SINK":                 "http://" + ln.Addr().String() + "/",
	})
	return []side{
			{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
				return h.runRunnerSide(ctx, sc, batch, merge(env, map[string]string{"MV_ORDERING": "key"}))
			}},
			{"baseline", func(ctx context.Context, sc scenario) (sideResult, error) {
				return h.runRunnerSide(ctx, sc, batch, merge(env, map[string]string{"MV_ORDERING": "unordered"}))
			}},
		}, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		}, nil
}
